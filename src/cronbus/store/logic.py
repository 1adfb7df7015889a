"""The decisions both store backends share, each taken through the state machine; no I/O.

A backend reads rows, asks this module what they become (a finished attempt, an expired lease,
a cancel, a new run's first state, a silent worker) and which wake-up channels the change must
nudge, then writes the answer in its own SQL.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..distribution.fanout import Settle, Tally, after_reduce, settle
from ..errors import CronbusError, InvalidTransitionError
from ..model import (
    ErrorInfo,
    FanOut,
    FanOutKind,
    Job,
    JobSpec,
    Lane,
    NewRun,
    Outcome,
    Overlap,
    RunFilter,
)
from ..states import ACTIVE, AttemptOutcome, RunEvent, RunState, sources, transition
from ..triggers import trigger_from_spec
from .ports import CONTROL_CHANNEL, JOBS_CHANNEL, RUNS_CHANNEL
from .wake import ENDED_CHANNEL

log = logging.getLogger("cronbus.store")

LEASE_EXPIRED = "LeaseExpired"
"""The error type recorded on an attempt whose lease expired."""
WORKER_GONE = "WorkerGone"
"""The error type of a broadcast child whose worker left before running it."""
P = TypeVar("P")


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """How a run's row changes when one of its attempts ends."""

    state: RunState
    eta: float
    lane: Lane
    used: int
    lost: int
    finished_at: float | None


def finish(state: RunState, outcome: Outcome, eta: float, now: float) -> Finish:
    """Decide a run's next state from its current one and how its attempt ended.

    ``eta`` is the run's current due time; it changes only when a retry is scheduled.
    """
    used = 1 if outcome.counts else 0
    lost = 0 if outcome.counts else 1
    lane = Lane.FRESH
    if outcome.outcome is AttemptOutcome.SUCCEEDED:
        new = transition(state, RunEvent.SUCCEED)
    elif outcome.outcome is AttemptOutcome.LOST:
        new = transition(state, RunEvent.LOSE)
        eta = min(eta, now)
    else:
        new = transition(state, RunEvent.FAIL)
        if new is RunState.FAILED:
            if outcome.retry_at is None:
                new = transition(new, RunEvent.GIVE_UP)
            else:
                new = transition(new, RunEvent.RETRY)
                eta, lane = outcome.retry_at, Lane.RETRY
    return Finish(
        state=new,
        eta=eta,
        lane=lane,
        used=used,
        lost=lost,
        finished_at=now if new.terminal else None,
    )


def initial_state(eta: float, now: float) -> RunState:
    """A new run's first state: waiting for a worker if due, else for its time."""
    return RunState.QUEUED if eta <= now else RunState.SCHEDULED


def lease_lost(
    run_id: int, attempt_id: int, state: RunState, lost: int, max_lost: int, eta: float, now: float
) -> tuple[Finish, Outcome]:
    """What a run whose lease expired becomes, and its attempt's (lost) outcome.

    A lost attempt sends the run back to the queue without spending an attempt; one lost
    ``max_lost`` times is given up on as if it had failed (a task that kills its worker would
    otherwise be retried forever).
    """
    new = transition(state, RunEvent.LOSE)
    message = "the worker holding the lease stopped renewing it"
    if new in sources(RunEvent.CLAIM) and lost + 1 >= max_lost:
        new = transition(transition(state, RunEvent.FAIL), RunEvent.GIVE_UP)
        message += f"; lost {lost + 1} times, so the run is dead"
    change = Finish(
        state=new,
        eta=min(eta, now),
        lane=Lane.FRESH,
        used=0,
        lost=1,
        finished_at=now if new.terminal else None,
    )
    outcome = Outcome(
        run_id=run_id,
        attempt_id=attempt_id,
        outcome=AttemptOutcome.LOST,
        error=ErrorInfo(type=LEASE_EXPIRED, message=message),
        counts=False,
    )
    return change, outcome


def cancel_state(run_id: int, state: RunState) -> RunState:
    """A run's state after a cancel: cancelled if it waits, cancelling if it runs."""
    if state not in sources(RunEvent.CANCEL):
        raise InvalidTransitionError(f"run {run_id} is {state.value}; it cannot be cancelled")
    return transition(state, RunEvent.CANCEL)


def wakeups(state: RunState, concurrency_key: str | None = None) -> frozenset[str]:
    """The wake-up channels to nudge after a run moved to ``state``.

    A run that waits for a worker (new, retried, requeued, lost) may be claimable or change the
    earliest due time that idle workers sleep towards; a run asked to cancel must be told by its
    worker; a run with a concurrency key (a job's overlap key, or a limit key: pass either)
    that stopped running lets the runs queued behind it go; a run that ended may be awaited by
    a ``handle.wait()`` (the stores nudge that channel only towards processes that wait).
    """
    channels: set[str] = set()
    if state.terminal:
        channels.add(ENDED_CHANNEL)
    if state in sources(RunEvent.CLAIM) | sources(RunEvent.DUE):
        channels.add(RUNS_CHANNEL)
    if state is transition(RunState.RUNNING, RunEvent.CANCEL):
        channels.add(CONTROL_CHANNEL)
    if concurrency_key is not None and state not in ACTIVE:
        channels.add(RUNS_CHANNEL)
    return frozenset(channels)


JOB_FOLLOW_UP_WAKEUPS = frozenset({JOBS_CHANNEL, RUNS_CHANNEL})
"""The channels to nudge after a job's run ended and the job planned its next fire or fired its
children: schedulers plan again, workers may claim the new runs."""


def holds_cancelling(state: RunState) -> bool:
    """Whether a held attempt's run was asked to cancel (its worker must stop it)."""
    return state is transition(RunState.RUNNING, RunEvent.CANCEL)


def job_run(job: Job, fire_at: float, eta: float) -> NewRun:
    """The run of ``job`` for its fire at ``fire_at``, due at ``eta`` (in the job's namespace)."""
    spec = job.spec
    return NewRun(
        task=spec.task,
        queue=spec.queue,
        args_json=spec.args_json,
        kwargs_json=spec.kwargs_json,
        priority=spec.priority,
        eta=eta,
        max_attempts=spec.max_attempts,
        timeout=spec.timeout,
        job_id=job.id,
        fire_at=fire_at,
        concurrency_key=None if spec.overlap is Overlap.ALLOW else f"job:{job.id}",
        overlap=spec.overlap,
        namespace=spec.namespace,
        fanout=job_fanout(spec),
    )


def job_fanout(spec: JobSpec) -> FanOut | None:
    """The fan-out of each fire of a job: a broadcast, shards, or none."""
    if spec.broadcast:
        return FanOut(kind=FanOutKind.BROADCAST)
    if spec.shards is not None:
        return FanOut(kind=FanOutKind.SHARDS, shards=spec.shards)
    return None


def after_fire(job_id: int, trigger: str, now: float) -> float | None:
    """The next fire that an ``after`` job plans when its run ends at ``now`` (its trigger
    decides, so its start and end bounds hold); None when it has none.

    A stored trigger this cronbus refuses (written by an older version, or by hand) leaves the
    job without a next fire, logged as an error: it must not fail the transaction that ends the
    run, which would leave the run running for ever.
    """
    try:
        return trigger_from_spec(json.loads(trigger)).next_fire(now)
    except (CronbusError, ArithmeticError, ValueError) as exc:
        log.error(
            "job %d has an invalid trigger, so its next fire is not planned: %s; fix it with "
            "`cronbus jobs update`",
            job_id,
            exc,
            extra={"action": "job.invalid_trigger", "job_id": job_id},
        )
        return None


def overlap_decisions(
    picks: Sequence[P],
    busy: Mapping[str, Sequence[int]],
    policy: Callable[[P], tuple[str | None, str | None]],
) -> tuple[list[P], list[P], list[int]]:
    """Apply job overlap policies among picked runs that share a concurrency key.

    ``busy`` maps keys to the ids of their running runs; ``policy`` gives a pick's key and
    overlap. Returns the runs to start, those to end ``skipped``, and the busy runs to cancel:
    a ``queue`` run whose key is busy (or taken earlier in this batch) waits; a ``skip`` one
    ends skipped; a ``replace`` one asks the busy runs to cancel and starts.
    """
    waiting = {key: list(ids) for key, ids in busy.items()}
    kept: list[P] = []
    skipped: list[P] = []
    cancel: list[int] = []
    taken: set[str] = set()
    for pick in picks:
        key, name = policy(pick)
        overlap = Overlap(name or Overlap.ALLOW)
        if key is None or overlap is Overlap.ALLOW:
            kept.append(pick)
        elif key in waiting and overlap is Overlap.REPLACE and key not in taken:
            cancel.extend(waiting.pop(key))
            kept.append(pick)
        elif key in waiting or key in taken:
            if overlap is Overlap.SKIP:
                skipped.append(pick)
            # QUEUE (or a second REPLACE in one batch): it waits for the next claim.
        else:
            kept.append(pick)
        if key is not None:
            taken.add(key)
    return kept, skipped, cancel


def listing_index(filter: RunFilter) -> str:
    """The index one namespace's ranges of a run listing walk, newest first (0006): the most
    selective filter given, each index ending in the run id so the keyset continues in it."""
    if filter.job_id is not None:
        return "runs_by_job"
    if filter.task is not None and not filter.states:
        return "runs_by_task"
    if filter.queue is not None and not filter.states:
        return "runs_by_queue"
    return "runs_by_state"


CREATED_AFTER_PROBE = 1000
"""A listing from a creation time also starts its ranges at the lowest id of the namespace's runs
created since then, found through ``run_payloads_by_created`` when there are at most this many:
without that bound, a window holding fewer runs than a page (the runs of the last minute) would
scan every older run in vain. With more, each range fills its page before it gets that old."""


NO_RUNS_SINCE = 9223372036854775807
"""The bound when no run of the namespace was created since: beyond every id."""


def created_after_bound(index_hint: str, namespace: str, since: str) -> str:
    """The SQL of that bound for one namespace (``namespace`` and ``since`` are the SQL of the
    namespace and the time): exact, whatever the clocks of the writers, since every run's payload
    row records its namespace and creation time; 0 (no bound) when the runs created since are
    many, and :data:`NO_RUNS_SINCE` when there are none."""
    return f"""(
        SELECT CASE WHEN count(*) = 0 THEN {NO_RUNS_SINCE}
                    WHEN count(*) <= {CREATED_AFTER_PROBE} THEN min(run_id) ELSE 0 END
        FROM (SELECT run_id FROM run_payloads {index_hint}
              WHERE namespace = {namespace} AND created_at >= {since}
              LIMIT {CREATED_AFTER_PROBE + 1}) AS since)"""


def listing_arms(filter: RunFilter, namespaces: Sequence[str]) -> list[tuple[str, str | None]]:
    """The (namespace, state) ranges a listing reads, each in id order, merged newest first: one
    per namespace and state asked for; without states, one per namespace (by task, queue or
    job), or one per namespace and state of the run state machine (every run of a namespace,
    through ``runs_by_state``: no index of its own, which each claim would have to update)."""
    if filter.states:
        states: list[str | None] = [*sorted({state.value for state in filter.states})]
    elif listing_index(filter) != "runs_by_state":
        states = [None]
    else:
        states = [state.value for state in RunState]
    return [(namespace, state) for namespace in namespaces for state in states]


# -- fan-out parents and their children ----------------------------------------------------------
# A child run has ``parent_id``; a counted child also has ``child_index`` (shard, map item or
# broadcast ordinal). The reduce run has ``parent_id`` but no ``child_index``: its end is not
# counted, it decides the parent (``after_reduce``). ``fanouts.ended`` always equals the number
# of the parent's counted children in a terminal state, so every path that ends a run, and
# every requeue, keeps it so in the same transaction.


@dataclass(frozen=True, slots=True, kw_only=True)
class Ended:
    """A run that became terminal in this transaction, as the children accounting needs it."""

    run_id: int
    state: RunState
    parent_id: int | None
    child_index: int | None


def counted_ends(ended: Sequence[Ended]) -> list[tuple[int, int, int]]:
    """``(parent_id, ended, succeeded)`` to add to each parent's counters for the counted
    children among ``ended``, by ascending parent id (PostgreSQL updates the ``fanouts`` rows
    in that order, so two transactions never wait on each other's parents)."""
    tallies: dict[int, list[int]] = {}
    for end in ended:
        if end.parent_id is None or end.child_index is None or not end.state.terminal:
            continue
        tally = tallies.setdefault(end.parent_id, [0, 0])
        tally[0] += 1
        tally[1] += end.state is RunState.SUCCEEDED
    return [(parent, n, ok) for parent, (n, ok) in sorted(tallies.items())]


def reduce_ends(ended: Sequence[Ended]) -> list[tuple[int, RunState]]:
    """``(parent_id, state)`` of the reduce runs among ``ended``, by ascending parent id."""
    return sorted(
        (end.parent_id, end.state)
        for end in ended
        if end.parent_id is not None and end.child_index is None and end.state.terminal
    )


def parent_decision(parent: RunState, tally: Tally, reduce: RunState | None = None) -> Settle:
    """What a parent does after its counters changed (``reduce``: its reduce run just ended in
    that state). Only a WAITING parent moves: a map parent whose body still runs decides when
    its attempt ends (:func:`own_end`); a dead or cancelled one stays until revived."""
    if parent is not RunState.WAITING:
        return Settle.WAIT
    if reduce is not None:
        return after_reduce(reduce)
    return settle(tally)


def settled_state(decision: Settle) -> RunState:
    """A waiting parent's state after ``decision`` (SUCCEED or FAIL)."""
    event = RunEvent.CHILDREN_SUCCEEDED if decision is Settle.SUCCEED else RunEvent.CHILDREN_FAILED
    return transition(RunState.WAITING, event)


def own_end(change: Finish, tally: Tally | None) -> tuple[Finish, Settle]:
    """A map parent's own attempt ended (``change`` from :func:`finish`); ``tally`` is its
    counters, None when it made no children (then nothing changes).

    A body that succeeded while children are still going makes the parent wait for them
    (AWAIT: lease cleared, no finish time); with every child ended it settles at once:
    REDUCE (wait for the reduce run the store creates now), SUCCEED, or FAIL (dead). A body
    that failed follows the usual retry or death; its children live on. A cancel asked while
    the body ran loses to a body that succeeded, as for any run.
    """
    if tally is None or change.state is not RunState.SUCCEEDED:
        return change, Settle.WAIT
    decision = settle(tally)
    waiting = transition(RunState.RUNNING, RunEvent.AWAIT)
    if decision is Settle.SUCCEED:
        return change, decision
    if decision is Settle.FAIL:
        state = settled_state(decision)
        return dataclasses.replace(change, state=state), decision
    return dataclasses.replace(change, state=waiting, finished_at=None), decision


def revives(kind: FanOutKind | str | None, body: AttemptOutcome | str | None) -> bool:
    """Whether a dead or cancelled run, requeued, is revived as a waiting parent (its failed
    children requeued) rather than queued to run again: a broadcast or shards parent always
    (it has no body of its own); a map parent whose body had succeeded (``body``: the outcome
    of its last attempt). A map parent whose body failed runs its body again (a retried body
    maps no item twice)."""
    if kind is None:
        return False
    if FanOutKind(kind) is not FanOutKind.MAP:
        return True
    return body is not None and AttemptOutcome(body) is AttemptOutcome.SUCCEEDED


def revived_state(parent: RunState, revivable: bool) -> RunState | None:
    """A parent's state when some of its children were requeued: waiting again if it had ended
    dead or cancelled (and :func:`revives` says it may), else None (unchanged)."""
    if revivable and parent in sources(RunEvent.REVIVE):
        return transition(parent, RunEvent.REVIVE)
    return None


def cancels_children(state: RunState) -> bool:
    """Whether a run cancelled from ``state`` takes its children with it: a waiting parent
    (a running map parent keeps them: the cancel stops its body, as a failure would)."""
    return state is RunState.WAITING


def worker_gone(worker: str) -> ErrorInfo:
    """The error of a broadcast child whose worker left before running it."""
    return ErrorInfo(type=WORKER_GONE, message=f"worker {worker} left before running it")


WORKER_GONE_STATE = transition(RunState.FAILED, RunEvent.GIVE_UP)
"""A waiting broadcast child's state when its worker is gone: dead (it cannot move)."""
