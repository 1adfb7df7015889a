"""The figures derived from a run that every door shows the same way: its result, its tries,
its duration and its worker. The store edge (:func:`cronbus.store.rows.run_from_row`) applies
:func:`shown_result` and :func:`tries`; the CLI and the console word the rest with
:func:`attempts_text`, :func:`attempts_cell` and :func:`duration`; the HTTP API returns the
numbers they are made from (``attempts``, ``tries``, ``lost``, ``max_attempts``,
``started_at``, ``worker_id``).

**Tries and attempts.** An *attempt* is one execution on one worker; ``attempts`` counts them
all. A *try* is an attempt that spends the retry budget (``max_attempts``: the task's
``retries`` + 1). A lost attempt (its worker died or was stopped) spends no try, and a retry by
hand (``cronbus runs retry``, a bulk ``runs.retry``, a dead letter requeued) gives the run a
fresh budget: its tries count from zero again, and ``max_attempts`` stays what the task
allows. So ``try k of max`` always reads against the budget that decides whether the run is
retried again, and the attempts beyond the tries are said apart: ``2 attempts: try 1 of 1,
1 before a retry by hand``. (Growing ``max_attempts`` with each retry by hand would make
"of max" count budgets nobody set, and hide that the task allows one try.)

**Duration.** A run's ``started_at`` is when its first attempt started; it took
``finished_at - started_at``. Its wait in the queue before that is not its duration (the
console used to count from ``created_at``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import JSON, Children, FanOutKind, Run
from .states import ACTIVE, RunState

__all__ = [
    "AttemptFigures",
    "attempt_figures",
    "attempts_cell",
    "attempts_text",
    "duration",
    "shown_result",
    "tries",
]


def shown_result(own: JSON, children: Children | None, reduce_result: JSON) -> JSON:
    """The result a run shows: a map-reduce parent's is its reduce run's (the value the
    whole map computed, what ``handle.result`` returns); a broadcast or shards parent has
    none; any other run's is what its last attempt returned (``own``)."""
    if children is None:
        return own
    if children.kind is not FanOutKind.MAP:
        return None
    if children.reduce_run_id is None:
        return own
    return reduce_result


def tries(used: int, state: RunState) -> int:
    """The tries a run has spent since its budget was last renewed: ``used`` (the attempts
    that ended and counted) and the one in flight while it runs (the worker's log says
    ``try k of max`` from the moment it starts)."""
    return used + (1 if state in ACTIVE else 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptFigures:
    """A run's attempts, split the way :mod:`cronbus.run_figures` explains."""

    made: int
    """Every attempt, in all."""
    tries: int
    """Tries spent against the current budget (the running one included)."""
    allowed: int
    """The budget: ``max_attempts``."""
    lost: int
    """Lost attempts since the budget was last renewed (they spend no try)."""
    earlier: int
    """Attempts made before the last retry by hand."""


def attempt_figures(run: Run) -> AttemptFigures:
    """The attempt figures of ``run``."""
    earlier = max(0, run.attempts - run.tries - run.lost)
    return AttemptFigures(
        made=run.attempts,
        tries=run.tries,
        allowed=run.max_attempts,
        lost=run.lost,
        earlier=earlier,
    )


def attempts_text(run: Run) -> str:
    """``1 of 3`` when every attempt was a try of the current budget; otherwise ``3 attempts:
    try 1 of 1, 1 lost, 1 before a retry by hand``."""
    f = attempt_figures(run)
    if f.made == f.tries:
        return f"{f.tries} of {f.allowed}"
    extra = []
    if f.lost:
        extra.append(f"{f.lost} lost")
    if f.earlier:
        extra.append(f"{f.earlier} before a retry by hand")
    noun = "attempt" if f.made == 1 else "attempts"
    return ", ".join([f"{f.made} {noun}: try {f.tries} of {f.allowed}", *extra])


def attempts_cell(run: Run) -> str:
    """A table's short form: ``1/3`` (try 1 of 3) when every attempt was a try of the current
    budget; otherwise the attempts made first, as attempts are numbered, then the tries:
    ``3 (1/1)`` (:func:`attempts_text` says what the others were)."""
    f = attempt_figures(run)
    if f.made == f.tries:
        return f"{f.tries}/{f.allowed}"
    return f"{f.made} ({f.tries}/{f.allowed})"


def duration(run: Run) -> float | None:
    """How long the run took, from its first attempt's start to its end (None: it has not
    both started and ended)."""
    if run.started_at is None or run.finished_at is None:
        return None
    return max(0.0, run.finished_at - run.started_at)
