"""Routing in the SQLite store: targets chosen when runs are inserted, and rerouted when their
worker is gone (see :mod:`cronbus.distribution.routing`, which decides; this module reads the
live workers, turns and loads it needs and writes its answers, inside the caller's write
transaction).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...distribution.routing import (
    LiveWorker,
    Strategy,
    assign_targets,
    needs_load,
    needs_workers,
)
from ...model import NewRun
from ...states import AttemptOutcome
from ..logic import WORKER_GONE_STATE, Ended, worker_gone
from ..rows import decode_list
from . import dist_sql as dq
from .rows import Row, sequence

REROUTE_BATCH = 1000
"""The most stranded runs one reroute moves (the next reap period takes the rest)."""


def live_workers(
    conn: sqlite3.Connection, now: float, namespaces: Sequence[str] | None, *, load: bool = False
) -> list[LiveWorker]:
    """The live workers of ``namespaces`` (None: of all), with their loads when ``load``."""
    if namespaces is None:
        rows = conn.execute(dq.ALL_LIVE_WORKERS, {"now": now}).fetchall()
    else:
        params = {"now": now, "spaces": json.dumps(sorted(set(namespaces)))}
        rows = conn.execute(dq.LIVE_WORKERS, params).fetchall()
    loads: dict[str, int] = {}
    if load and rows:
        ids = json.dumps([row[0] for row in rows])
        loads = dict(conn.execute(dq.LOADS, {"ids": ids}).fetchall())
    return [
        LiveWorker(
            id=row[0],
            namespace=row[1],
            queues=tuple(json.loads(row[2])),
            labels=frozenset(json.loads(row[3])),
            tasks=frozenset(json.loads(row[4])),
            load=loads.get(row[0], 0),
        )
        for row in rows
    ]


def route(
    conn: sqlite3.Connection,
    runs: Sequence[NewRun],
    now: float,
    workers: Sequence[LiveWorker] | None = None,
) -> tuple[list[NewRun], list[LiveWorker]]:
    """``runs`` with targets chosen for those of a targeted strategy, and the live workers read
    (none read when no run needs them: a plain insert costs no statement more).

    Fan-out parents are not routed (they never run); their children are, as they go in.
    """
    if not needs_workers(runs):
        return list(runs), list(workers or ())
    if workers is None:
        spaces = [run.namespace for run in runs]
        workers = live_workers(conn, now, spaces, load=needs_load(runs))
    routed = [run for run in runs if run.fanout is None]
    cursors = sorted(
        {(run.namespace, run.task) for run in routed if run.route == Strategy.ROUND_ROBIN}
    )
    turns: dict[tuple[str, str], int] = {}
    if cursors:
        params = (
            json.dumps(sorted({space for space, _ in cursors})),
            json.dumps(sorted({task for _, task in cursors})),
        )
        turns = {(row[0], row[1]): row[2] for row in conn.execute(dq.TURNS, params)}
    targeted, advanced = assign_targets(routed, workers, turns)
    conn.executemany(dq.PUT_TURN, [(space, task, turn) for (space, task), turn in advanced.items()])
    chosen = iter(targeted)
    return [run if run.fanout is not None else next(chosen) for run in runs], list(workers)


def reroute(conn: sqlite3.Connection, now: float) -> tuple[int, list[Ended]]:
    """Route again the waiting runs targeted at workers that are no longer live.

    Returns how many runs changed, and the broadcast children that ended dead (``pinned``:
    they cannot move) for the caller's children accounting.
    """
    workers = live_workers(conn, now, None)
    alive = {worker.id for worker in workers}
    gone = [row[0] for row in conn.execute(dq.TARGETS) if row[0] not in alive]
    if not gone:
        return 0, []
    rows = conn.execute(dq.STRANDED, {"gone": json.dumps(gone), "limit": REROUTE_BATCH}).fetchall()
    pinned = [row for row in rows if row[4] == Strategy.PINNED]
    moving = [row for row in rows if row[4] != Strategy.PINNED]
    ended = _strand(conn, pinned, now)
    if moving:
        runs = [_as_new_run(row) for row in moving]
        loaded = live_workers(conn, now, None, load=True) if needs_load(runs) else workers
        routed, _ = route(conn, runs, now, loaded)
        conn.executemany(
            dq.RETARGET,
            [(run.target_worker, now, row[0]) for run, row in zip(routed, moving, strict=True)],
        )
    return len(rows), ended


def _as_new_run(row: Row) -> NewRun:
    """A stranded run (a row of ``STRANDED``) as routing sees it, without a target."""
    return NewRun(
        task=row[1],
        queue=row[2],
        namespace=row[3],
        route=row[4],
        route_key=row[5],
        route_labels=decode_list(row[6]),
        route_order=decode_list(row[7]),
        eta=0.0,
    )


def _strand(conn: sqlite3.Connection, rows: Sequence[Row], now: float) -> list[Ended]:
    """End broadcast children whose worker is gone: dead, with an attempt saying why."""
    if not rows:
        return []
    first = sequence(conn, "attempts") + 1
    ended: list[Ended] = []
    for offset, row in enumerate(rows):
        error = worker_gone(row[8])
        conn.execute(
            dq.INSERT_GONE_ATTEMPT,
            {
                "id": row[0],
                "number": row[11] + 1,
                "worker": row[8],
                "now": now,
                "outcome": AttemptOutcome.LOST.value,
                "error_type": error.type,
                "error_message": error.message,
            },
        )
        params = {
            "id": row[0],
            "state": WORKER_GONE_STATE.value,
            "attempt_id": first + offset,
            "now": now,
        }
        conn.execute(dq.END_STRANDED, params)
        ended.append(
            Ended(run_id=row[0], state=WORKER_GONE_STATE, parent_id=row[9], child_index=row[10])
        )
    return ended
