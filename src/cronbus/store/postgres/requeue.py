"""Requeue in the PostgreSQL store, with the fan-out rules of :mod:`cronbus.store.logic`: a
child queued again is no longer counted as ended at its parent, which waits again if it had
ended; a fan-out parent is revived (its dead and cancelled children, and its reduce run, queued
again) instead of running again. Inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...states import RunEvent, RunState, sources
from ..logic import revived_state, revives
from . import fanout_sql as fq
from . import sql as q
from .connection import Row, Tx
from .rows import arrays

_REQUEUABLE = sources(RunEvent.REQUEUE)


async def requeue(tx: Tx, run_ids: Sequence[int] | None, now: float) -> list[int]:
    """Queue dead (or cancelled, when named) runs again; revive fan-out parents. Returns the
    ids of the runs queued and of the parents revived, sorted."""
    if run_ids is None:
        parents = await tx.rows(fq.DEAD_PARENTS)
    else:
        parents = await tx.rows(fq.PARENTS_OF_IDS, {"ids": list(run_ids)})
    revive = sorted(
        row[0] for row in parents if RunState(row[1]) in _REQUEUABLE and revives(row[2], row[3])
    )
    if run_ids is None:
        requeued = await tx.rows(q.REQUEUE_ALL_DEAD, {"now": now, "keep": revive})
    else:
        kept = set(revive)
        ids = [run_id for run_id in run_ids if run_id not in kept]
        requeued = await tx.rows(q.REQUEUE_IDS, {"now": now, "ids": ids}) if ids else []
    if revive:
        requeued += await tx.rows(fq.REVIVE_CHILDLESS, {"ids": revive, "now": now})
        requeued += await tx.rows(fq.REQUEUE_CHILDREN, {"parents": revive, "now": now})
    revived = await _uncount(tx, requeued, now)
    return sorted({row[0] for row in requeued} | set(revived))


async def _uncount(tx: Tx, requeued: Sequence[Row], now: float) -> list[int]:
    """Take requeued children (rows of id, parent_id, child_index) off their parents' ended
    counts (counters locked in ascending parent id) and revive the parents that had ended, up
    the tree; the parents revived."""
    revived: list[int] = []
    pending = [(row[1], row[2]) for row in requeued]
    while pending:
        counts: dict[int, int] = {}
        for parent, index in pending:
            if parent is not None:
                counts[parent] = counts.get(parent, 0) + (index is not None)
        if not counts:
            break
        parents = sorted(counts)
        await tx.queue(fq.LOCK_FANOUTS, {"ids": parents})
        subtract = [(parent, counts[parent]) for parent in parents if counts[parent]]
        if subtract:
            await tx.queue(fq.SUB_ENDS, arrays(("parent", "ended"), subtract))
        rows = await tx.rows(fq.PARENTS_OF_IDS, {"ids": parents})
        changes = []
        for parent, state, kind, body, _, _ in rows:
            new = revived_state(RunState(state), revives(kind, body))
            if new is not None:
                changes.append((parent, state, new.value))
        pending = []
        if changes:
            params = {**arrays(("ids", "olds", "news"), changes), "now": now}
            for run_id, grandparent, index in await tx.rows(fq.REVIVE, params):
                revived.append(run_id)
                pending.append((grandparent, index))
    return revived
