"""Fan-out parents in the PostgreSQL store: their children created at insert, and counted,
in the same transaction, whenever one ends.

Every path that ends a run (a completion, the reaper, a cancel, a skip, a reroute of a
broadcast child) hands the runs it ended to :func:`children_ended`, which adds them to their
parents' counters (``fanouts``, locked in ascending parent id) and then settles the parents
that wait and are done: a reduce run to create, or the parent's own end, which may in turn end
a child of another parent. See :mod:`.fanout_sql` for the lock order.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ...distribution import fanout
from ...distribution.routing import LiveWorker
from ...model import NewRun
from ...states import AttemptOutcome, RunState
from ..logic import (
    Ended,
    counted_ends,
    parent_decision,
    reduce_ends,
    settled_state,
    wakeups,
)
from ..ports import RUNS_CHANNEL
from ..rows import WaitingBroadcast
from . import fanout_sql as fq
from . import inserts, jobs
from .connection import Row, Tx
from .rows import arrays


async def expand_parents(
    tx: Tx,
    runs: Sequence[NewRun],
    rows: Sequence[Row],
    live: Sequence[LiveWorker] | None,
    now: float,
) -> None:
    """The counters and children of the fan-out parents just inserted (``rows``: created and
    id per run); a broadcast without a live worker waits for one (:func:`settle_broadcasts`).
    ``live``: the live workers if read (always, when a broadcast is among ``runs``)."""
    counters: list[Row] = []
    children: list[NewRun] = []
    for run, (created, run_id) in zip(runs, rows, strict=True):
        if run.fanout is None or not created:
            continue
        # A broadcast without children waits for a live worker (settle_broadcasts).
        kids = fanout.expand(run_id, run, live or ())
        counters.append((run_id, run.fanout.kind.value, len(kids), ""))
        children.extend(kids)
    if counters:
        await tx.queue(fq.INSERT_FANOUTS, arrays(("run_id", "kind", "total", "note"), counters))
    if children:
        await inserts.insert_runs(tx, children, now, live)
        tx.nudges.add(RUNS_CHANNEL)


async def settle_broadcasts(
    tx: Tx, parents: Sequence[WaitingBroadcast], live: Sequence[LiveWorker], now: float, wait: float
) -> int:
    """Expand the waiting broadcast ``parents`` (locked by the caller) that live workers serve
    now; end dead, with a NoLiveWorker attempt and note, those whose ``wait`` is over. Returns
    how many changed."""
    changed = 0
    gave_up: list[WaitingBroadcast] = []
    for parent in parents:
        kids = fanout.expand(parent.id, parent.run, live)
        step = fanout.pending(len(kids), parent.since, now, wait)
        if step is fanout.Pending.WAIT:
            continue
        changed += 1
        if step is fanout.Pending.GIVE_UP:
            gave_up.append(parent)
            continue
        await inserts.insert_runs(tx, kids, now, live)
        await tx.queue(fq.SET_TOTAL, {"total": len(kids), "id": parent.id})
        tx.nudges.add(RUNS_CHANNEL)
    if gave_up:
        await _give_up(tx, gave_up, now)
    return changed


async def _give_up(tx: Tx, parents: Sequence[WaitingBroadcast], now: float) -> None:
    """End broadcast parents no live worker came for: dead, saying so, with what follows."""
    errors = [
        (p.id, fanout.no_worker_error(p.run.task, p.run.queue, now - p.since).message)
        for p in parents
    ]
    params = {
        **arrays(("ids", "messages"), errors),
        "worker": fanout.NO_WORKER,
        "now": now,
        "outcome": AttemptOutcome.FAILED.value,
        "error_type": fanout.NO_LIVE_WORKER,
    }
    await tx.queue(fq.GIVE_UP_ATTEMPTS, params)
    failed = settled_state(fanout.Settle.FAIL)
    await end_parents(tx, [(p.id, failed) for p in parents], now)


async def end_parents(tx: Tx, ends: Sequence[tuple[int, RunState]], now: float) -> None:
    """End waiting parents (ascending id) in the given terminal states, with what follows
    their end: their own parent's counters, their job's next fire or child jobs."""
    if not ends:
        return
    params = {**arrays(("ids", "states"), sorted((i, s.value) for i, s in ends)), "now": now}
    rows = await tx.rows(fq.END_PARENTS, params)
    ended: list[Ended] = []
    after: list[int] = []
    succeeded: list[int] = []
    for run_id, state, parent_id, child_index, job_id, key in rows:
        new = RunState(state)
        tx.nudges.update(wakeups(new, key))
        ended.append(Ended(run_id=run_id, state=new, parent_id=parent_id, child_index=child_index))
        if job_id is not None:
            after.append(job_id)
            if new is RunState.SUCCEEDED:
                succeeded.append(job_id)
    # Their own parents' counters first (the lock order of fanout_sql), then their jobs.
    await children_ended(tx, ended, now)
    if after:
        triggers = await jobs.after_triggers(tx, after)
        await jobs.runs_ended(tx, triggers, succeeded, now)


async def children_ended(
    tx: Tx, ended: Sequence[Ended], now: float, awaiting: Collection[int] = ()
) -> None:
    """Count the children among ``ended`` at their parents and settle the parents that wait
    and are done; ``awaiting``: parents whose own attempt just succeeded (they settle now if
    their children all ended already). Runs without a parent cost nothing."""
    counted = counted_ends(ended)
    reduced = dict(reduce_ends(ended))
    parents = sorted({parent for parent, _, _ in counted} | reduced.keys() | set(awaiting))
    if not parents:
        return
    await tx.queue(fq.LOCK_FANOUTS, {"ids": parents})
    if counted:
        await tx.queue(fq.COUNT_ENDS, arrays(("parent", "ended", "succeeded"), counted))
    rows = await tx.rows(fq.WAITING_PARENTS, {"ids": parents})
    ends: list[tuple[int, RunState]] = []
    for run_id, total, count, ok, has_reduce, reduce_run, spec in rows:
        tally = fanout.Tally(
            total=total, ended=count, succeeded=ok, has_reduce=has_reduce, reduce_run=reduce_run
        )
        decision = parent_decision(RunState.WAITING, tally, reduced.get(run_id))
        if decision is fanout.Settle.REDUCE:
            await _reduce(tx, run_id, spec, now)
        elif decision is not fanout.Settle.WAIT:
            ends.append((run_id, settled_state(decision)))
    await end_parents(tx, ends, now)


async def _reduce(tx: Tx, parent_id: int, spec: str, now: float) -> None:
    """Create the reduce run of a parent whose children all succeeded, with their results in
    ``child_index`` order, and note it on the parent."""
    results = [row[0] for row in await tx.rows(fq.CHILD_RESULTS, {"parent": parent_id})]
    run = fanout.reduce_run(spec, parent_id, results, now)
    inserting = await inserts.insert_runs(tx, [run], now)
    ((_, run_id),) = await inserting.fetchall()
    await tx.queue(fq.SET_REDUCE_RUN, {"run": run_id, "parent": parent_id})
    tx.nudges.add(RUNS_CHANNEL)
