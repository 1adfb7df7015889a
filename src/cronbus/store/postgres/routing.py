"""Routing in the PostgreSQL store: live workers, targets at insert, reroutes, unknown tasks.

A live worker is a registry row ``alive`` whose heartbeat (the worker's own clock, as
``heartbeat_at`` is written) is within its own ``lease_seconds`` of the caller's ``now``: the
rule of :mod:`cronbus.liveness`, which :meth:`list_workers` applies too. Targets are chosen by
:func:`~cronbus.distribution.routing.assign_targets` in the transaction that inserts (or
reroutes) the runs; round robin's turn per (namespace, task) is a ``route_cursors`` row, locked
by that transaction (in key order, so two inserts never wait on each other in a cycle).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from ...distribution.routing import (
    TARGETED,
    LiveWorker,
    Strategy,
    assign_targets,
    needs_load,
)
from ...liveness import live_sql
from ...model import NewRun
from ...states import ACTIVE, RunEvent, RunState, sources, sql_in
from ..logic import WORKER_GONE, WORKER_GONE_STATE, Ended, wakeups, worker_gone
from ..ports import RUNS_CHANNEL
from ..rows import decode_list, waiting_broadcast
from . import fanout
from . import fanout_sql as fq
from .connection import Connected, Row, Tx
from .rows import arrays

_LIVE = live_sql("%(now)s", "w")
_WAITING = sql_in(sources(RunEvent.CLAIM) | sources(RunEvent.DUE))
LIVE_WORKERS = f"""
SELECT w.id, w.namespace, w.queues, w.labels, w.tasks FROM workers w
WHERE {_LIVE} AND w.namespace = ANY(%(spaces)b::text[])
ORDER BY w.id
"""
# A worker's load: the runs it holds and the waiting runs targeted at it (runs_owner,
# runs_targeted).
LOADS = f"""
SELECT w, count(*) FROM (
    SELECT lease_owner AS w FROM runs
    WHERE lease_owner = ANY(%(ids)b::text[]) AND state IN {sql_in(ACTIVE)}
    UNION ALL
    SELECT target_worker FROM runs
    WHERE target_worker = ANY(%(ids)b::text[]) AND state IN {_WAITING}
) AS held
GROUP BY w
"""
# Each turn's row is created or locked, in key order, and its turn read under the lock.
LOCK_TURNS = """
INSERT INTO route_cursors (namespace, task, turn)
SELECT n, t, 0 FROM unnest(%(spaces)b::text[], %(tasks)b::text[]) AS c(n, t) ORDER BY n, t
ON CONFLICT (namespace, task) DO UPDATE SET turn = route_cursors.turn
RETURNING namespace, task, turn
"""
SET_TURNS = """
UPDATE route_cursors c SET turn = t.turn
FROM unnest(%(spaces)b::text[], %(tasks)b::text[], %(turns)b::int[]) AS t(n, k, turn)
WHERE c.namespace = t.n AND c.task = t.k
"""
# The targets of waiting runs whose worker is not live: a loose scan of runs_targeted, one
# step per distinct target, so its cost grows with the workers, not with the runs.
GONE_TARGETS = f"""
WITH RECURSIVE targets(w) AS (
    (SELECT target_worker FROM runs
     WHERE target_worker IS NOT NULL AND state IN {_WAITING}
     ORDER BY target_worker LIMIT 1)
    UNION ALL
    SELECT (SELECT r.target_worker FROM runs r
            WHERE r.target_worker > t.w AND r.state IN {_WAITING}
            ORDER BY r.target_worker LIMIT 1)
    FROM targets t WHERE t.w IS NOT NULL
)
SELECT t.w FROM targets t
WHERE t.w IS NOT NULL AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.id = t.w AND {_LIVE})
"""
STRANDED = f"""
SELECT id, task, queue, namespace, route, route_key, route_labels, route_order, target_worker,
    parent_id, child_index, attempts
FROM runs
WHERE target_worker = ANY(%(gone)b::text[]) AND state IN {_WAITING}
ORDER BY id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""
RETARGET = f"""
UPDATE runs r SET target_worker = t.target, updated_at = %(now)s
FROM unnest(%(ids)b::bigint[], %(targets)b::text[]) AS t(id, target)
WHERE r.id = t.id AND r.state IN {_WAITING}
"""
# A broadcast child whose worker left ends dead, with an attempt that says why.
STRAND = f"""
WITH gone AS (
    SELECT id, worker, message, nextval('attempts_id_seq') AS attempt_id
    FROM unnest(%(ids)b::bigint[], %(workers)b::text[], %(messages)b::text[])
        WITH ORDINALITY AS g(id, worker, message, ord)
    ORDER BY ord
),
ended AS (
    UPDATE runs r
    SET state = %(state)s, attempts = r.attempts + 1, attempt_id = g.attempt_id,
        finished_at = %(now)s, updated_at = %(now)s
    FROM gone g
    WHERE r.id = g.id AND r.state IN {_WAITING}
    RETURNING r.id, r.attempts, g.attempt_id, g.worker, g.message
)
INSERT INTO attempts (id, run_id, number, worker_id, started_at, finished_at, outcome,
    error_type, error_message)
SELECT attempt_id, id, attempts, worker, %(now)s, %(now)s, 'lost', %(error_type)s, message
FROM ended
"""
UNKNOWN_TASKS = f"""
SELECT t.task FROM (
    SELECT DISTINCT task FROM runs
    WHERE namespace = %(namespace)s AND state = '{RunState.QUEUED.value}'
) AS t
WHERE NOT EXISTS (
    SELECT 1 FROM workers w
    WHERE {_LIVE} AND w.namespace = %(namespace)s AND t.task = ANY(w.tasks)
)
ORDER BY t.task
"""
_REROUTE_BATCH = 1000


async def live_workers(tx: Tx, namespaces: Collection[str], now: float) -> list[LiveWorker]:
    """The live workers of ``namespaces``, by id, read in the caller's transaction."""
    rows = await tx.rows(LIVE_WORKERS, {"now": now, "spaces": sorted(namespaces)})
    return [
        LiveWorker(
            id=row[0],
            namespace=row[1],
            queues=tuple(row[2]),
            labels=frozenset(row[3]),
            tasks=frozenset(row[4]),
        )
        for row in rows
    ]


def _targeted(run: NewRun) -> bool:
    return run.fanout is None and run.target_worker is None and run.route in TARGETED


async def assign(tx: Tx, runs: Sequence[NewRun], workers: Sequence[LiveWorker]) -> list[NewRun]:
    """``runs`` with targets chosen for those of a targeted strategy without one (fan-out
    parents are not targeted: they never run; their children are). Loads are read only for
    ``least_busy``, and round robin's turns are locked only for round robin."""
    todo = [run for run in runs if _targeted(run)]
    if not todo or not workers:
        return list(runs)
    if needs_load(todo):
        workers = await _with_loads(tx, workers)
    cursors = sorted({(run.namespace, run.task) for run in todo if run.route == "round_robin"})
    turns = await _lock_turns(tx, cursors) if cursors else {}
    assigned, advanced = assign_targets(todo, workers, turns)
    if advanced:
        rows = sorted((n, t, turn) for (n, t), turn in advanced.items())
        await tx.queue(SET_TURNS, arrays(("spaces", "tasks", "turns"), rows))
    chosen = iter(assigned)
    return [next(chosen) if _targeted(run) else run for run in runs]


async def _with_loads(tx: Tx, workers: Sequence[LiveWorker]) -> list[LiveWorker]:
    rows = await tx.rows(LOADS, {"ids": [worker.id for worker in workers]})
    loads = {worker: int(count) for worker, count in rows}
    return [dataclasses.replace(w, load=loads.get(w.id, 0)) for w in workers]


async def _lock_turns(tx: Tx, cursors: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
    rows = await tx.rows(LOCK_TURNS, arrays(("spaces", "tasks"), cursors))
    return {(namespace, task): turn for namespace, task, turn in rows}


def _stranded_run(row: Row) -> NewRun:
    """A waiting run read back as what routing needs to choose its target again."""
    return NewRun(
        task=row[1],
        queue=row[2],
        args_json="[]",
        kwargs_json="{}",
        eta=0.0,
        namespace=row[3],
        route=row[4],
        route_key=row[5],
        route_labels=decode_list(row[6]),
        route_order=decode_list(row[7]),
    )


class PostgresRouting(Connected):
    """Reroutes and unknown tasks (:class:`~cronbus.store.ports.RunLeases.reroute`,
    :class:`~cronbus.store.ports.Workers.unknown_tasks`) of the PostgreSQL store."""

    async def reroute(self, now: float) -> int:
        """Route again the waiting runs targeted at a worker that is no longer live: by their
        strategy (no target when none fits, nor for ``any``/``labels``); a broadcast child
        (``pinned``) ends dead (WorkerGone) and counts as ended at its parent."""
        async with self._db.transaction(durable=False) as tx:
            gone = [row[0] for row in await tx.rows(GONE_TARGETS, {"now": now})]
            if not gone:
                return 0
            params = {"gone": gone, "limit": _REROUTE_BATCH}
            rows = await tx.rows(STRANDED, params)
            if rows:
                await self._reroute_rows(tx, rows, now)
        return len(rows)

    async def _reroute_rows(self, tx: Tx, rows: Sequence[Row], now: float) -> None:
        pinned = [row for row in rows if row[4] == Strategy.PINNED.value]
        moving = [row for row in rows if row[4] != Strategy.PINNED.value]
        if moving:
            runs = [_stranded_run(row) for row in moving]
            if any(run.route in TARGETED for run in runs):
                workers = await live_workers(tx, {run.namespace for run in runs}, now)
                runs = await assign(tx, runs, workers)
            targets = [(row[0], run.target_worker) for row, run in zip(moving, runs, strict=True)]
            await tx.queue(RETARGET, {**arrays(("ids", "targets"), targets), "now": now})
            tx.nudges.add(RUNS_CHANNEL)
        if pinned:
            await self._strand(tx, pinned, now)

    async def _strand(self, tx: Tx, rows: Sequence[Row], now: float) -> None:
        """End pinned runs whose worker left: dead, with a WorkerGone attempt."""
        state = WORKER_GONE_STATE
        gone = [(row[0], row[8], worker_gone(row[8]).message) for row in rows]
        params = {
            **arrays(("ids", "workers", "messages"), gone),
            "state": state.value,
            "error_type": WORKER_GONE,
            "now": now,
        }
        await tx.queue(STRAND, params)
        tx.nudges.update(wakeups(state))
        ended = [
            Ended(run_id=row[0], state=state, parent_id=row[9], child_index=row[10]) for row in rows
        ]
        await fanout.children_ended(tx, ended, now)

    async def settle_broadcasts(self, now: float, wait: float) -> int:
        """Expand the broadcasts that waited for a live worker and have one; end dead those
        that waited ``wait`` seconds in vain (see :func:`.fanout.settle_broadcasts`)."""
        async with self._db.transaction(durable=False) as tx:
            rows = await tx.rows(fq.WAITING_BROADCASTS, {"limit": _REROUTE_BATCH})
            if not rows:
                return 0
            parents = [waiting_broadcast(row) for row in rows]
            live = await live_workers(tx, {p.run.namespace for p in parents}, now)
            return await fanout.settle_broadcasts(tx, parents, live, now, wait)

    async def unknown_tasks(self, now: float, namespace: str = "default") -> list[str]:
        """Tasks of queued runs of ``namespace`` that no live worker knows, by name."""
        rows = await self._db.rows(UNKNOWN_TASKS, {"now": now, "namespace": namespace})
        return [row[0] for row in rows]
