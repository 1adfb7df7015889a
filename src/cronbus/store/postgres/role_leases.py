"""Role leases and snapshots in the PostgreSQL store (:mod:`cronbus.store.lease_ports`).

Leases are timed by the server's clock, as run and connector leases are (:mod:`..fencing`):
a process whose clock is off can neither steal a lease nor keep one too long. Taking or
renewing is one upsert whose ``WHERE`` lets it through only when the lease is free, run out or
already the caller's, so racing processes cannot both win.
"""

from __future__ import annotations

from ..fencing import SERVER_CLOCK, LeaseClock
from .connection import Connected

_NOW = "coalesce(%(clock)s::float8, extract(epoch FROM statement_timestamp()))"
HOLD = f"""
INSERT INTO role_leases (name, holder, expires_at)
VALUES (%(name)s, %(holder)s, {_NOW} + %(seconds)s)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE role_leases.holder = excluded.holder OR role_leases.expires_at <= {_NOW}
RETURNING 1
"""
RELEASE = "DELETE FROM role_leases WHERE name = %(name)s AND holder = %(holder)s"
HOLDER = f"SELECT holder FROM role_leases WHERE name = %(name)s AND expires_at > {_NOW}"
PUT_SNAPSHOT = """
INSERT INTO snapshots (key, taken_at, body) VALUES (%(key)s, %(now)s, %(body)s)
ON CONFLICT (key) DO UPDATE SET taken_at = excluded.taken_at, body = excluded.body
"""
GET_SNAPSHOT = "SELECT taken_at, body FROM snapshots WHERE key = %(key)s"


class PostgresRoleLeases(Connected):
    """Role leases and snapshots (see :mod:`cronbus.store.lease_ports`)."""

    lease_clock: LeaseClock = SERVER_CLOCK
    """Whose clock times leases: the server's; tests that move time by hand set ``"caller"``."""

    def _role_clock(self, now: float) -> float | None:
        return None if self.lease_clock == SERVER_CLOCK else now

    async def hold_lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        """Take or renew ``name`` for ``holder``; True when ``holder`` holds it."""
        params = {"name": name, "holder": holder, "seconds": seconds}
        row = await self._db.one(HOLD, {**params, "clock": self._role_clock(now)})
        return row is not None

    async def release_lease(self, name: str, holder: str) -> None:
        """Give up ``name`` if ``holder`` holds it."""
        await self._db.execute(RELEASE, {"name": name, "holder": holder})

    async def lease_holder(self, name: str, now: float) -> str | None:
        """Who holds ``name`` at ``now`` (by the lease clock)."""
        row = await self._db.one(HOLDER, {"name": name, "clock": self._role_clock(now)})
        return None if row is None else str(row[0])

    async def put_snapshot(self, key: str, body: str, now: float) -> None:
        """Store ``body`` under ``key``, taken at ``now``."""
        await self._db.execute(PUT_SNAPSHOT, {"key": key, "now": now, "body": body})

    async def get_snapshot(self, key: str) -> tuple[float, str] | None:
        """The time taken and body under ``key``, or None."""
        row = await self._db.one(GET_SNAPSHOT, {"key": key})
        return None if row is None else (float(row[0]), str(row[1]))
