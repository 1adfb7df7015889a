"""Requeue in the SQLite store, with the fan-out rules of :mod:`cronbus.store.logic`: a child
queued again is no longer counted as ended at its parent, which waits again if it had ended;
a fan-out parent is revived (its dead and cancelled children, and its reduce run, queued
again) instead of running again; a broadcast parent that had no children (no live worker came)
waits for one again. Inside the caller's write transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...states import RunEvent, RunState, sources
from ..logic import revived_state, revives
from . import dist_sql as dq
from . import sql as q
from .rows import Row

_REQUEUABLE = sources(RunEvent.REQUEUE)


def requeue(conn: sqlite3.Connection, run_ids: Sequence[int] | None, now: float) -> list[int]:
    """Queue dead (or cancelled, when named) runs again; revive fan-out parents. Returns the
    ids of the runs queued and of the parents revived."""
    if run_ids is None:
        parents = conn.execute(dq.DEAD_PARENTS).fetchall()
    else:
        parents = conn.execute(dq.PARENTS_OF_IDS, (json.dumps(list(run_ids)),)).fetchall()
    revive = sorted(
        row[0] for row in parents if RunState(row[1]) in _REQUEUABLE and revives(row[2], row[3])
    )
    if run_ids is None:
        params = {"now": now, "keep": json.dumps(revive)}
        requeued = conn.execute(q.REQUEUE_ALL_DEAD, params).fetchall()
    else:
        kept = set(revive)
        ids = json.dumps([run_id for run_id in run_ids if run_id not in kept])
        requeued = conn.execute(q.REQUEUE_IDS, {"now": now, "ids": ids}).fetchall()
    if revive:
        childless = conn.execute(
            dq.REVIVE_CHILDLESS, {"now": now, "ids": json.dumps(revive)}
        ).fetchall()
        conn.execute(dq.CLEAR_NOTES, (json.dumps([row[0] for row in childless]),))
        requeued += childless
    for parent in revive:
        requeued += conn.execute(dq.REQUEUE_CHILDREN, {"parent": parent, "now": now}).fetchall()
        (reduce_id,) = conn.execute(dq.REDUCE_RUN, (parent,)).fetchone()
        if reduce_id is not None:
            params = {"now": now, "ids": json.dumps([reduce_id])}
            requeued += conn.execute(q.REQUEUE_IDS, params).fetchall()
    return sorted({row[0] for row in requeued} | set(_uncount(conn, requeued, now)))


def _uncount(conn: sqlite3.Connection, requeued: Sequence[Row], now: float) -> list[int]:
    """Take requeued children (rows of id, parent_id, child_index) off their parents' ended
    counts and revive the parents that had ended, up the tree; the parents revived."""
    revived: list[int] = []
    pending = list(requeued)
    while pending:
        counts: dict[int, int] = {}
        for _, parent, index in pending:
            if parent is not None:
                counts[parent] = counts.get(parent, 0) + (index is not None)
        conn.executemany(
            dq.SUB_ENDS, [(count, parent) for parent, count in sorted(counts.items()) if count]
        )
        pending = []
        if not counts:
            break
        rows = conn.execute(dq.PARENTS_OF_IDS, (json.dumps(sorted(counts)),)).fetchall()
        for parent, state, kind, body, grandparent, index in rows:
            new = revived_state(RunState(state), revives(kind, body))
            if new is None:
                continue
            params = {"id": parent, "to": new.value, "from": state, "now": now}
            if conn.execute(dq.REVIVE, params).rowcount:
                revived.append(parent)
                pending.append((parent, grandparent, index))
    return revived
