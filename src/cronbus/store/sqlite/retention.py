"""Retention on SQLite (:class:`~cronbus.store.retention_ports.RetentionStore`).

Candidates are read outside any write transaction (WAL readers never block the writer); each
delete is one ``BEGIN IMMEDIATE`` transaction of at most a batch, timed from its first statement
to its commit, so a retention pass delays other writers by one batch at most. Deletes leave free
pages; :meth:`SqliteRetention.reclaim_space` hands them back to the file system with
``PRAGMA incremental_vacuum`` (new files are created with ``auto_vacuum = INCREMENTAL``; an
older file is converted once by ``cronbus migrate``, see :func:`enable_incremental_vacuum`).
Either way freed pages are reused by later inserts, so the file stops growing.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from ...errors import StoreError
from ...events.states import DeliveryState
from ...states import TERMINAL, RunState, sql_in
from ..retention_ports import FinishedRun, Purged
from . import retention_sql as q
from .connection import Connected, Database
from .files import MEMORY
from .listing import run_namespaces

T = TypeVar("T")
log = logging.getLogger("cronbus.store")

_INCREMENTAL = 2
"""``PRAGMA auto_vacuum`` answers 0 (none), 1 (full) or 2 (incremental)."""


def finished_runs(
    conn: sqlite3.Connection,
    namespace: str,
    before: float,
    after: tuple[float, int] | None,
    limit: int,
    states: Sequence[RunState],
) -> list[FinishedRun]:
    """A batch of finished runs, oldest end first (see the protocol)."""
    from_at, from_id = after if after is not None else (float("-inf"), 0)
    sql = q.FINISHED_RUNS.format(states=sql_in(states))
    params = {
        "namespace": namespace,
        "before": before,
        "from_at": from_at,
        "from_id": from_id,
        "limit": limit,
    }
    return [
        FinishedRun(id=i, finished_at=f, state=RunState(s), task=t, held=bool(h))
        for i, f, s, t, h in conn.execute(sql, params)
    ]


def purge_runs(conn: sqlite3.Connection, runs: Sequence[FinishedRun]) -> int:
    """Delete the runs still due among ``runs``, with what hangs off them."""
    read = {run.id: run.finished_at for run in runs}
    found = conn.execute(q.STILL_DUE, (json.dumps(list(read)),)).fetchall()
    # Ended again since it was read (a requeued dead run that ran again): not due now.
    due = [run_id for run_id, finished_at in found if read[run_id] == finished_at]
    if due:
        ids = json.dumps(due)
        for sql in q.DELETE_RUNS:
            conn.execute(sql, (ids,))
    return len(due)


def purge_deliveries(
    conn: sqlite3.Connection, subscription_id: int, state: DeliveryState, before: float, limit: int
) -> int:
    """Delete a batch of ended deliveries of one subscription, with their attempts."""
    rows = conn.execute(q.ENDED_DELIVERIES, (subscription_id, state.value, before, limit))
    ids = [row[0] for row in rows]
    if ids:
        doomed = json.dumps(ids)
        for sql in q.DELETE_DELIVERIES:
            conn.execute(sql, (doomed,))
    return len(ids)


def purge_events(
    conn: sqlite3.Connection, topic: str, after: int, cut: int, limit: int
) -> tuple[int, int | None]:
    """Delete a batch of old events of ``topic`` nobody needs; returns how many and where the
    next batch starts (None: done). The floor is read in this transaction, so an event above a
    cursor is never removed however the cursors moved since the cut was computed."""
    (floor,) = conn.execute(q.CURSOR_FLOOR, (topic,)).fetchone()
    if floor is not None:
        cut = min(cut, floor)
    params = {"topic": topic, "after": after, "cut": cut, "limit": limit}
    rows = conn.execute(q.OLD_EVENTS, params).fetchall()
    doomed = [offset for offset, needed in rows if not needed]
    if doomed:
        conn.execute(q.DELETE_EVENTS, (topic, json.dumps(doomed)))
    return len(doomed), (rows[-1][0] if len(rows) == limit else None)


KEPT_FREE = 64
"""Free pages left in the file rather than vacuumed by a transaction of their own."""


def _free_pages(conn: sqlite3.Connection) -> tuple[int]:
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    return (int(free),)


def reclaim_space(conn: sqlite3.Connection, pages: int) -> int:
    """Free pages given back to the file system (none unless the file is incremental)."""
    (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
    if mode != _INCREMENTAL:
        return 0
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    count = min(int(free), pages)
    for _ in range(count):
        # Python's sqlite3 steps this pragma once per execute, and each step frees one page
        # (reading its rows does not step it on): one execute per page, in one transaction.
        conn.execute("PRAGMA incremental_vacuum(1)")
    return count


def enable_incremental_vacuum(conn: sqlite3.Connection) -> bool:
    """Convert a file made before 0013 to ``auto_vacuum = INCREMENTAL`` with one ``VACUUM``
    (which rewrites the whole file and holds the write lock meanwhile: ``cronbus migrate`` does
    it, never a running role). True when it converted the file."""
    (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
    if mode == _INCREMENTAL:
        return False
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("VACUUM")
    return True


async def convert_to_incremental(database: Database) -> None:
    """``cronbus migrate``'s last step on SQLite: convert a file made before 0013 (see
    :func:`enable_incremental_vacuum`). A file in use (busy) is left as it is, with a warning:
    its freed pages are still reused, it only does not shrink."""
    if database.path == MEMORY:
        return
    try:
        converted = await database.call(enable_incremental_vacuum, database.conn)
    except StoreError as exc:
        log.warning(
            "%s: not converted to incremental vacuum (%s); run `cronbus migrate` again while "
            "no process uses the store to let retention shrink the file",
            database.path,
            exc,
        )
        return
    if converted:
        log.warning(
            "%s: converted to incremental vacuum (one VACUUM): retention now gives freed "
            "pages back to the file system",
            database.path,
        )


class SqliteRetention(Connected):
    """The retention role of the SQLite store (see the module's docstring)."""

    async def run_namespaces(self) -> list[str]:
        """The namespaces that have runs (a skip scan of ``runs_by_state``)."""
        return await self._call(run_namespaces, self._db, inline="read")

    async def finished_runs(
        self,
        namespace: str,
        before: float,
        after: tuple[float, int] | None,
        limit: int,
        states: Sequence[RunState] | None = None,
    ) -> list[FinishedRun]:
        """Finished runs of ``namespace`` that ended at or before ``before``, oldest first."""
        chosen = sorted(TERMINAL if states is None else set(states) & TERMINAL)
        if not chosen:
            return []
        return await self._call(finished_runs, self._db, namespace, before, after, limit, chosen)

    async def purge_runs(self, runs: Sequence[FinishedRun]) -> Purged:
        """Delete the runs still due among ``runs`` in one short transaction."""
        if not runs:
            return Purged(removed=0, seconds=0.0)
        return await self._timed(purge_runs, list(runs))

    async def purge_deliveries(
        self, subscription_id: int, state: DeliveryState, before: float, limit: int
    ) -> Purged:
        """Delete a batch of acked or dead deliveries of one subscription."""
        if not state.terminal:
            raise ValueError(f"a {state.value} delivery is live and is never purged")
        return await self._timed(purge_deliveries, subscription_id, state, before, limit)

    async def purge_events(self, topic: str, after: int, cut: int, limit: int) -> Purged:
        """Delete a batch of old events of ``topic`` that nothing needs."""
        (removed, last), seconds = await self._call(
            self._in_timed, purge_events, (topic, after, cut, limit)
        )
        return Purged(removed=removed, seconds=seconds, last=last)

    async def reclaim_space(self, pages: int) -> Purged:
        """Hand at most ``pages`` free pages back to the file system, once there are a few
        (a read first, without the write lock: most batches free fewer pages than
        :data:`KEPT_FREE`, which later inserts reuse anyway)."""
        (free,) = await self._call(_free_pages, self._db, inline="read")
        if free < min(pages, KEPT_FREE):
            return Purged(removed=0, seconds=0.0)
        return await self._timed(reclaim_space, pages)

    async def _timed(self, fn: Callable[..., int], *args: object) -> Purged:
        removed, seconds = await self._call(self._in_timed, fn, args)
        return Purged(removed=removed, seconds=seconds)

    def _in_timed(self, fn: Callable[..., T], args: Sequence[object]) -> tuple[T, float]:
        """``fn(conn, *args)`` in one write transaction, with how long it held the lock. Not
        durable: a purge lost in a power cut is done again by the next pass."""
        with self._write(durable=False) as conn:
            started = time.perf_counter()
            result = fn(conn, *args)
        return result, time.perf_counter() - started
