"""Role leases and shared snapshots: housekeeping done by one process of a cluster at a time.

A **role lease** names a chore that one process at a time should do for the whole store:
applying retention, evaluating alerts, computing the figures every role exports. Whoever holds
the lease does the chore; the others find it held and skip it. A holder renews its lease each
time it works (``hold_lease`` again); when it dies, the lease runs out and another process takes
it. The chores are idempotent, so a lease that changes hands mid-chore costs a repeated batch,
never a wrong result.

A **snapshot** is a document computed by a lease holder and read by everyone: the aggregate of
queue depths and workers that metrics and ``cronbus top`` show is counted once for the cluster,
not once per process or per scrape.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["RoleLeases", "Snapshots"]


class RoleLeases(Protocol):
    """Named leases on chores (see the module's docstring)."""

    async def hold_lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        """Take ``name`` for ``holder`` until ``now + seconds``, or renew it when ``holder``
        holds it already; True when ``holder`` holds it after the call. A lease held by
        another whose expiry has not passed is left alone (False)."""
        ...

    async def release_lease(self, name: str, holder: str) -> None:
        """Give up ``name`` if ``holder`` holds it, so another process may take it at once."""
        ...

    async def lease_holder(self, name: str, now: float) -> str | None:
        """Who holds ``name`` at ``now`` (None: free or run out)."""
        ...


class Snapshots(Protocol):
    """Documents computed once and read by every process (see the module's docstring)."""

    async def put_snapshot(self, key: str, body: str, now: float) -> None:
        """Store ``body`` (a JSON document) under ``key``, taken at ``now``, replacing any."""
        ...

    async def get_snapshot(self, key: str) -> tuple[float, str] | None:
        """The time taken and body stored under ``key``, or None."""
        ...
