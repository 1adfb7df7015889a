"""Fan-out in the SQLite store: runs inserted with their routes and children, children created
by a running parent (``spawn``), and a parent's counters kept in the transaction that ends each
child, up to the parent's own end (see :mod:`cronbus.distribution.fanout`, which decides, and
the children accounting of :mod:`cronbus.store.logic`).

Every function runs inside the caller's write transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...distribution.fanout import (
    NO_WORKER,
    Pending,
    Settle,
    Tally,
    expand,
    no_worker_error,
    pending,
    reduce_run,
    with_broadcast_labels,
)
from ...distribution.routing import LiveWorker
from ...errors import InvalidArgumentError, LeaseLostError
from ...model import Deferred, FanOutKind, NewRun
from ...states import ACTIVE, TRANSITIONS, AttemptOutcome, RunEvent, RunState
from ..logic import (
    Ended,
    cancels_children,
    counted_ends,
    parent_decision,
    reduce_ends,
    settled_state,
    wakeups,
)
from ..rows import WaitingBroadcast, waiting_broadcast
from . import dist_sql as dq
from .routing import live_workers, route
from .rows import Row, insert_rows, sequence

BROADCAST_BATCH = 1000
"""Waiting broadcast parents looked at per transaction (the rest at the next pass)."""


def insert_runs(
    conn: sqlite3.Connection,
    runs: Sequence[NewRun],
    now: float,
    ended: list[int] | None = None,
) -> list[Deferred]:
    """Insert runs: targets chosen for routed runs, then the runs, then the children of each new
    broadcast or shards parent (a known idempotency key or (job, fire) returns its run, and
    expands nothing). A broadcast that finds no live worker waits for one (see
    :func:`settle_broadcasts`); a parent that ended at once has its id added to ``ended`` (its
    job plans its next fire)."""
    runs = [with_broadcast_labels(run) for run in runs]
    routed, workers = route(conn, runs, now)
    deferred = insert_rows(conn, routed, now)
    for run, done in zip(routed, deferred, strict=True):
        if run.fanout is not None and done.created:
            _expand(conn, done.id, run, workers, now, ended)
    return deferred


def _expand(
    conn: sqlite3.Connection,
    parent_id: int,
    parent: NewRun,
    workers: Sequence[LiveWorker],
    now: float,
    ended: list[int] | None,
) -> None:
    """Insert a new parent's counters and children (it was inserted waiting)."""
    assert parent.fanout is not None
    children = expand(parent_id, parent, workers)
    kind = parent.fanout.kind
    conn.execute(dq.INSERT_FANOUT, (parent_id, kind.value, len(children), ""))
    if children:
        insert_runs(conn, children, now)
        return
    if kind is FanOutKind.BROADCAST:
        # No live worker serves it yet (workers starting): it waits, and settle_broadcasts
        # makes its children when one registers, or ends it dead once its wait is over.
        return
    state = settled_state(Settle.SUCCEED)
    conn.execute(dq.END_PARENT, {"id": parent_id, "state": state.value, "now": now})
    if ended is not None and parent.job_id is not None:
        ended.append(parent_id)


def settle_broadcasts(
    conn: sqlite3.Connection, now: float, wait: float
) -> tuple[int, list[Ended], list[int]]:
    """Expand the broadcast parents that wait for a live worker and have one now; end dead,
    with an attempt saying why, those whose ``wait`` (from their creation or requeue) is
    over. Returns how many changed, and the parents that ended (children of a parent; runs of
    a job) for the caller's accounting."""
    rows = conn.execute(dq.WAITING_BROADCASTS, {"limit": BROADCAST_BATCH}).fetchall()
    if not rows:
        return 0, [], []
    workers = live_workers(conn, now, None)
    changed, ended, job_runs = 0, [], []
    for parent in map(waiting_broadcast, rows):
        children = expand(parent.id, parent.run, workers)
        step = pending(len(children), parent.since, now, wait)
        if step is Pending.WAIT:
            continue
        changed += 1
        if step is Pending.EXPAND:
            insert_runs(conn, children, now)
            conn.execute(dq.ADD_TOTAL, (len(children), parent.id))
            continue
        state = _give_up(conn, parent, now)
        if parent.parent_id is not None:
            ended.append(
                Ended(
                    run_id=parent.id,
                    state=state,
                    parent_id=parent.parent_id,
                    child_index=parent.child_index,
                )
            )
        if parent.job_id is not None:
            job_runs.append(parent.id)
    return changed, ended, job_runs


def _give_up(conn: sqlite3.Connection, parent: WaitingBroadcast, now: float) -> RunState:
    """End a broadcast parent no live worker came for: dead, with an attempt and a note."""
    error = no_worker_error(parent.run.task, parent.run.queue, now - parent.since)
    conn.execute(
        dq.INSERT_GONE_ATTEMPT,
        {
            "id": parent.id,
            "number": parent.attempts + 1,
            "worker": NO_WORKER,
            "now": now,
            "outcome": AttemptOutcome.FAILED.value,
            "error_type": error.type,
            "error_message": error.message,
        },
    )
    attempt_id = sequence(conn, "attempts")
    state = settled_state(Settle.FAIL)
    params = {"id": parent.id, "state": state.value, "attempt_id": attempt_id, "now": now}
    conn.execute(dq.GIVE_UP_PARENT, params)
    conn.execute(dq.SET_NOTE, (error.message, parent.id))
    return state


def account(
    conn: sqlite3.Connection, ended: Sequence[Ended], now: float, nudges: set[str]
) -> list[int]:
    """Count runs that became terminal at their parents, and settle the parents: a reduce run
    made, or the parent ended, in this transaction. Parents are updated by ascending id; a
    parent that ends is counted at its own parent in turn. Returns the parents that ended."""
    finished: list[int] = []
    pending = list(ended)
    while pending:
        decided: list[tuple[int, Row, RunState | None]] = []
        for parent, count, succeeded in counted_ends(pending):
            row = conn.execute(dq.ADD_ENDS, (count, succeeded, parent)).fetchone()
            if row is not None:
                decided.append((parent, row, None))
        for parent, state in reduce_ends(pending):
            row = conn.execute(dq.TALLY, (parent,)).fetchone()
            if row is not None:
                decided.append((parent, row, state))
        pending = []
        for parent, row, reduce_state in sorted(decided, key=lambda item: item[0]):
            end = _settle(conn, parent, row, reduce_state, now, nudges)
            if end is not None:
                finished.append(parent)
                pending.append(end)
    return finished


def _settle(
    conn: sqlite3.Connection,
    parent: int,
    row: Row,
    reduce_state: RunState | None,
    now: float,
    nudges: set[str],
) -> Ended | None:
    """Apply a parent's decision from its counters and state (a row of ``TALLY``); the parent's
    end, if it ended."""
    total, ended, succeeded, spec, reduce_id, state, grandparent, index = row
    if state is None:
        return None  # the parent was purged; its counters outlived it
    tally = Tally(
        total=total,
        ended=ended,
        succeeded=succeeded,
        has_reduce=spec is not None,
        reduce_run=reduce_id,
    )
    decision = parent_decision(RunState(state), tally, reduce_state)
    if decision is Settle.WAIT:
        return None
    if decision is Settle.REDUCE:
        create_reduce(conn, parent, spec, now, nudges)
        return None
    new = settled_state(decision)
    conn.execute(dq.END_PARENT, {"id": parent, "state": new.value, "now": now})
    return Ended(run_id=parent, state=new, parent_id=grandparent, child_index=index)


def create_reduce(
    conn: sqlite3.Connection, parent: int, spec: str, now: float, nudges: set[str]
) -> None:
    """Insert a parent's reduce run, its argument the children's results in index order."""
    results = [row[0] for row in conn.execute(dq.CHILD_RESULTS, (parent,))]
    (made,) = insert_runs(conn, [reduce_run(spec, parent, results, now)], now)
    conn.execute(dq.SET_REDUCE_RUN, (made.id, parent))
    nudges.update(wakeups(RunState.QUEUED))


def cancel_children(
    conn: sqlite3.Connection, parent: int, now: float, nudges: set[str]
) -> list[Ended]:
    """Cancel the children of a cancelled parent that are still going (waiting ones cancelled,
    running ones asked to stop; a waiting child parent takes its own children with it); the
    children that ended."""
    ended: list[Ended] = []
    parents = [parent]
    while parents:
        current = parents.pop()
        reduce_id = conn.execute(dq.REDUCE_RUN, (current,)).fetchone()
        for source, target in TRANSITIONS[RunEvent.CANCEL].items():
            if source is target:
                continue
            params = {
                "parent": current,
                "to": target.value,
                "from": source.value,
                "terminal": target.terminal,
                "now": now,
            }
            rows = conn.execute(dq.CANCEL_CHILDREN, params).fetchall()
            if reduce_id is not None and reduce_id[0] is not None:
                rows += conn.execute(dq.CANCEL_RUN, {**params, "id": reduce_id[0]}).fetchall()
            if rows:
                nudges.update(wakeups(target))
            for run_id, index in rows:
                if target.terminal:
                    ended.append(
                        Ended(run_id=run_id, state=target, parent_id=current, child_index=index)
                    )
                if cancels_children(source):
                    parents.append(run_id)
    return ended


def spawn(
    conn: sqlite3.Connection,
    parent_id: int,
    attempt_id: int,
    fence: int,
    children: Sequence[NewRun],
    reduce_spec: str | None,
    now: float,
) -> int:
    """Create map children of a running parent, fenced by its attempt and fence; children whose
    index exists already are skipped. Returns how many were new."""
    row = conn.execute(dq.PARENT_LEASE, (parent_id,)).fetchone()
    if row is None or RunState(row[0]) not in ACTIVE or row[1] != attempt_id or row[2] != fence:
        raise LeaseLostError(
            f"attempt {attempt_id} no longer holds run {parent_id}; its children were not created"
        )
    fresh: dict[int, NewRun] = {}
    for child in children:
        _check_child(child, parent_id)
        assert child.child_index is not None
        fresh.setdefault(child.child_index, child)
    conn.execute(dq.SPAWN_FANOUT, {"id": parent_id, "spec": reduce_spec})
    if fresh:
        indexes = json.dumps(sorted(fresh))
        for (index,) in conn.execute(dq.EXISTING_CHILDREN, (parent_id, indexes)):
            fresh.pop(index, None)
    new = [fresh[index] for index in sorted(fresh)]
    if new:
        insert_runs(conn, new, now)
        conn.execute(dq.ADD_TOTAL, (len(new), parent_id))
    return len(new)


def _check_child(child: NewRun, parent_id: int) -> None:
    """Refuse a child that does not name this parent and a place, or that fans out itself."""
    if child.parent_id != parent_id or child.child_index is None or child.child_index < 0:
        raise InvalidArgumentError(
            f"a child of run {parent_id} needs parent_id={parent_id} and a child_index >= 0",
            field="children",
        )
    if child.fanout is not None or child.idempotency_key is not None or child.job_id is not None:
        raise InvalidArgumentError(
            "a mapped child cannot fan out, nor carry an idempotency key or a job",
            field="children",
        )
