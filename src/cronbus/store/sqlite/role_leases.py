"""Role leases and snapshots in the SQLite store (:mod:`cronbus.store.lease_ports`).

One machine, one clock: leases are timed with the caller's ``now``. Taking or renewing a lease
is one upsert whose ``WHERE`` lets it through only when the lease is free, run out or already
the caller's, so two processes racing for it cannot both win. Both are bookkeeping, committed
relaxed: a lease lost in a power cut is taken again on the next pass.
"""

from __future__ import annotations

import sqlite3

from .connection import Connected

HOLD = """
INSERT INTO role_leases (name, holder, expires_at) VALUES (?1, ?2, ?3 + ?4)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE role_leases.holder = excluded.holder OR role_leases.expires_at <= ?3
"""
RELEASE = "DELETE FROM role_leases WHERE name = ? AND holder = ?"
HOLDER = "SELECT holder FROM role_leases WHERE name = ? AND expires_at > ?"
PUT_SNAPSHOT = """
INSERT INTO snapshots (key, taken_at, body) VALUES (?, ?, ?)
ON CONFLICT (key) DO UPDATE SET taken_at = excluded.taken_at, body = excluded.body
"""
GET_SNAPSHOT = "SELECT taken_at, body FROM snapshots WHERE key = ?"


def _hold(conn: sqlite3.Connection, name: str, holder: str, now: float, seconds: float) -> bool:
    return conn.execute(HOLD, (name, holder, now, seconds)).rowcount > 0


class SqliteRoleLeases(Connected):
    """Role leases and snapshots (see :mod:`cronbus.store.lease_ports`)."""

    async def hold_lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        """Take or renew ``name`` for ``holder``; True when ``holder`` holds it."""
        return await self._transact(_hold, name, holder, now, seconds, durable=False)

    async def release_lease(self, name: str, holder: str) -> None:
        """Give up ``name`` if ``holder`` holds it."""
        await self._transact(_execute, RELEASE, (name, holder), durable=False)

    async def lease_holder(self, name: str, now: float) -> str | None:
        """Who holds ``name`` at ``now``."""
        row = await self._one(HOLDER, (name, now))
        return None if row is None else str(row[0])

    async def put_snapshot(self, key: str, body: str, now: float) -> None:
        """Store ``body`` under ``key``, taken at ``now``."""
        await self._transact(_execute, PUT_SNAPSHOT, (key, now, body), durable=False)

    async def get_snapshot(self, key: str) -> tuple[float, str] | None:
        """The time taken and body under ``key``, or None."""
        row = await self._one(GET_SNAPSHOT, (key,))
        return None if row is None else (float(row[0]), str(row[1]))


def _execute(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> None:
    conn.execute(sql, params)
