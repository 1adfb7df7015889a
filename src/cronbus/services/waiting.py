"""Why a run waits, in words: a pure explanation from the run, the registry and a count.

A queued or scheduled run waits for a worker that may claim it: a live worker of its namespace
that serves its queue, knows its task (the claim takes only the tasks a worker's code
registers), carries every label the run needs, and is its target when the run is routed to
one; and then for room under its concurrency limit and its rate limit. A fan-out parent
(``waiting``) waits for its children, then for its reduce run. :func:`explain` says which of
these holds the run, from what the caller read (``runs show`` and ``GET /v1/runs/{id}``), so
the rules live once and are tested without a store.

A worker is live when the registry has it ``alive`` with a heartbeat within its own lease,
as routing and the claim see it: a draining worker claims nothing more, a stopped or silent
one nothing at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..fairness import serves
from ..liveness import is_live
from ..model import Children, FanOutKind, Run, WorkerInfo, WorkerState
from ..states import RunEvent, RunState, sources

PENDING = sources(RunEvent.CLAIM) | sources(RunEvent.DUE)
"""States of a run that waits for a worker: queued, or scheduled for later."""
PINNED = "pinned"
"""The route of a broadcast child: it runs on its worker or not at all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What the store knows of a run's limits beyond its keys: how many runs with its
    concurrency key are active now, and the limits' sizes when known (None: not known, so
    the explanation says less rather than guess)."""

    running: int = 0
    """Runs with the run's ``limit_key`` running or cancelling now."""
    limit_max: int | None = None
    rate_max: int | None = None
    rate_period: float | None = None


def explain(
    run: Run, workers: Sequence[WorkerInfo], now: float, limits: Limits | None = None
) -> list[str]:
    """The reasons ``run`` waits, most telling first; empty when nothing holds it (a run
    that has not ended waits for nothing in particular: a worker takes it when it can).

    ``workers``: the registry of the run's namespace (every state: a target that left is
    named as such); ``limits``: the count of the run's concurrency key when it has one.
    """
    if run.state is RunState.WAITING:
        return [children_line(run.children)]
    if run.state not in PENDING:
        return []
    live = [w for w in workers if is_live(w, now) and w.namespace == run.namespace]
    blocked = _unserved(run, live)
    if blocked is not None:
        return [blocked]
    lines = _target(run, workers, live, now)
    if run.eta <= now:
        lines += _limited(run, limits or Limits())
    return lines


def children_line(children: Children | None) -> str:
    """A waiting parent's line: ``waiting for children: 3 of 10 ended, 2 succeeded``."""
    if children is None:
        return "waiting for its children"
    if children.kind is FanOutKind.BROADCAST and children.total == 0:
        # No live worker served it when it was made: it waits broadcast_wait_seconds for one.
        return (
            "waiting for a live worker that serves its task and queue, to make its children "
            "(or it ends dead after broadcast_wait_seconds)"
        )
    if children.ended >= children.total and children.reduce_run_id is not None:
        return (
            f"waiting for its reduce run {children.reduce_run_id}: {children.succeeded} of "
            f"{children.total} children succeeded"
        )
    return (
        f"waiting for children: {children.ended} of {children.total} ended, "
        f"{children.succeeded} succeeded"
    )


def _unserved(run: Run, live: Sequence[WorkerInfo]) -> str | None:
    """Why no live worker may ever claim the run, or None when one may."""
    where = "" if run.namespace == "default" else f" in namespace {run.namespace!r}"
    serving = [w for w in live if serves(w.queues, run.queue)]
    if not serving:
        return (
            f"no live worker serves queue {run.queue!r}{where}; the run waits until one does "
            "(a worker started without --queues serves every queue)"
        )
    # Workers of older versions register no task list: they may know it, so no warning.
    knowing = [w for w in serving if not w.tasks or run.task in w.tasks]
    if not knowing:
        return (
            f"no live worker serving queue {run.queue!r} knows task {run.task!r}; the run "
            "waits until one with that task in its code does"
        )
    needed = set(run.route_labels)
    if needed and not any(needed <= set(w.labels) for w in knowing):
        named = ", ".join(sorted(needed))
        return (
            f"needs labels {named}: no live worker that knows task {run.task!r} carries them; "
            "the run waits until one does (cronbus worker --labels)"
        )
    return None


def _target(
    run: Run, workers: Sequence[WorkerInfo], live: Sequence[WorkerInfo], now: float
) -> list[str]:
    """Where a routed run is pinned, and what becomes of it when its worker is gone."""
    target = run.target_worker
    if target is None:
        return []
    if any(w.id == target for w in live):
        return [f"pinned to worker {target} (route {run.route}): only it claims the run"]
    known = next((w for w in workers if w.id == target), None)
    state = "not registered" if known is None else _state_word(known, now)
    if run.route == PINNED:
        return [
            f"waiting for worker {target}, which is {state}: a broadcast child runs only on "
            "its worker, so it ends dead (WorkerGone) when the reaper finds it"
        ]
    return [
        f"waiting for worker {target}, which is {state}: it will be rerouted "
        f"(route {run.route}) by the next reaper pass of any worker"
    ]


def _state_word(worker: WorkerInfo, now: float) -> str:
    # A registry read at another moment than ``now`` may still say alive: the rule decides.
    if worker.state is WorkerState.LOST or (
        worker.state is WorkerState.ALIVE and not is_live(worker, now)
    ):
        return "not alive (lost: silent for longer than its lease)"
    return f"not alive ({worker.state.value})"


def _limited(run: Run, limits: Limits) -> list[str]:
    """The limits a due run is under: at its concurrency limit, or subject to a rate."""
    lines = []
    if run.limit_key is not None:
        if limits.limit_max is None:
            if limits.running:
                lines.append(
                    f"concurrency limited (key {run.limit_key}: {limits.running} running now)"
                )
        elif limits.running >= limits.limit_max:
            lines.append(
                f"at its concurrency limit (key {run.limit_key}: {limits.running} running of "
                f"{limits.limit_max})"
            )
    if run.rate_key is not None:
        rate = ""
        if limits.rate_max is not None and limits.rate_period is not None:
            rate = f": at most {limits.rate_max} starts per {limits.rate_period:g} s"
        lines.append(f"rate limited (key {run.rate_key}{rate})")
    return lines
