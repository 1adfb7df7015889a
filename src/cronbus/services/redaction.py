"""Hiding run payloads from readers who may not see them.

Two rules, applied by the services to every run and attempt they return to a caller with a
token (runs listed, shown, paged as children, cancelled, retried or deferred; dead letters), so
the HTTP API, the console and the CLI through a server all honour them:

- a task's ``redact`` option (``@app.task(redact=("password",))``): those arguments, passed
  by keyword or by position, are hidden; ``redact=True`` hides every argument and the result.
  Only tasks this process's app registers are known: a run of a task the app does not
  register is shown whole (unless the next rule applies).
- a token made without the payloads permission (``tokens create --no-payloads``) sees every
  run's arguments and result hidden.

Local code and local commands (no token: they hold the store itself, and could read it
directly) see payloads whole, so a run's handle still reads the result its task returned.

A hidden value reads :data:`REDACTED` in its place: each hidden positional argument and each
hidden keyword argument's value (so the call's shape and argument names stay visible) and the
result (a result that is ``None`` - nothing yet, or nothing returned - stays ``None``). Errors
and logs are shown as they are. The store keeps the real values, and the worker receives them.

A search by payload (``RunQuery.args``) never reveals a hidden value: it is refused for a token
without the payloads permission and for an argument the task searched redacts, and a search of
every task leaves out the runs whose task hides an argument it matched on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..errors import ForbiddenError
from ..model import Attempt, Run
from ..task_policy import NO_REDACTION, Redaction
from .context import Context
from .views import RunDetail, RunQuery

REDACTED = "[redacted]"
"""What a hidden argument or result reads."""
EVERYTHING = Redaction(everything=True)


def redact_run(run: Run, rule: Redaction) -> Run:
    """``run`` with the payloads ``rule`` hides replaced by :data:`REDACTED`."""
    if not rule.hides_any:
        return run
    if rule.everything:
        return replace(
            run,
            args=[REDACTED for _ in run.args],
            kwargs=dict.fromkeys(run.kwargs, REDACTED),
            result=None if run.result is None else REDACTED,
        )
    return replace(
        run,
        args=[REDACTED if i in rule.positions else value for i, value in enumerate(run.args)],
        kwargs={k: REDACTED if k in rule.names else v for k, v in run.kwargs.items()},
    )


def redact_attempt(attempt: Attempt, rule: Redaction) -> Attempt:
    """``attempt`` with its result hidden when ``rule`` hides results."""
    if not rule.everything or attempt.result is None:
        return attempt
    return replace(attempt, result=REDACTED)


class Redactor:
    """The redaction rules of one caller (a :class:`Context`): its token's payloads
    permission and the app's tasks' ``redact`` options."""

    def __init__(self, context: Context) -> None:
        self._c = context

    def rule(self, task: str) -> Redaction:
        """What is hidden of the runs of ``task`` from this caller."""
        access = self._c.access
        if not access.payloads:
            return EVERYTHING
        if access.token_id is None:
            return NO_REDACTION  # local: the store's owner
        found = self._c.app.tasks.get(task)
        return NO_REDACTION if found is None else found.redaction

    def run(self, run: Run) -> Run:
        """A run as this caller may see it: a map-reduce parent shows its reduce run's result
        (:func:`cronbus.run_figures.shown_result`), hidden when the reduce task hides it."""
        shown = redact_run(run, self.rule(run.task))
        reduce_task = None if run.children is None else run.children.reduce_task
        hidden = reduce_task is not None and self.rule(reduce_task).everything
        if hidden and shown.result is not None:
            shown = replace(shown, result=REDACTED)
        return shown

    def runs(self, runs: Sequence[Run]) -> list[Run]:
        """Runs as this caller may see them."""
        return [self.run(run) for run in runs]

    def detail(self, detail: RunDetail) -> RunDetail:
        """A run's detail (the run, its attempts' results, its children) as this caller may
        see it."""
        rule = self.rule(detail.run.task)
        return replace(
            detail,
            run=self.run(detail.run),
            attempts=[redact_attempt(a, rule) for a in detail.attempts],
            children=self.runs(detail.children),
        )

    def check_search(self, query: RunQuery) -> None:
        """Refuse a search by payload that would reveal hidden values: any, for a caller
        without the payloads permission; by an argument that the task searched redacts.
        (A search of every task leaves out the runs whose task hides what it searches by:
        :meth:`found`.)"""
        if not query.args:
            return
        if not self._c.access.payloads:
            raise ForbiddenError(
                "this token may not read run arguments (it was made without the payloads "
                "permission), so it cannot search by them either"
            )
        if query.task is None:
            return
        rule = self.rule(query.task)
        for key, _ in query.args:
            if rule.hides(key):
                raise ForbiddenError(
                    f"task {query.task!r} redacts argument {key!r}: searching by it would reveal it"
                )

    def found(self, run: Run, query: RunQuery) -> bool:
        """Whether a search by payload may show ``run``: not when its task hides an argument
        the search matched on (the match itself would reveal the value)."""
        if not query.args:
            return True
        rule = self.rule(run.task)
        return not any(rule.hides(key) for key, _ in query.args)
