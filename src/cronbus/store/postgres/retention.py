"""Retention on PostgreSQL (:class:`~cronbus.store.retention_ports.RetentionStore`).

Candidates are read with a plain ``SELECT`` (no lock); each delete is one statement in its own
short transaction that locks its rows with ``SKIP LOCKED`` (a row another transaction holds is
left for the next pass, never waited for) and removes what hangs off them in the same
statement. Batches of a few hundred rows leave few dead tuples per transaction, which
autovacuum reclaims between passes; nothing here vacuums or locks a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...events.states import DeliveryState
from ...states import TERMINAL, RunState
from ..retention_ports import FinishedRun, Purged
from . import retention_sql as q
from .connection import Connected
from .sql import RUN_NAMESPACES


class PostgresRetention(Connected):
    """The retention role of the PostgreSQL store (see the module's docstring)."""

    async def run_namespaces(self) -> list[str]:
        """The namespaces that have runs (a loose scan of an index on ``namespace``)."""
        return [row[0] for row in await self._db.rows(RUN_NAMESPACES)]

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
        from_at, from_id = after if after is not None else (float("-inf"), 0)
        params = {
            "namespace": namespace,
            "before": before,
            "from_at": from_at,
            "from_id": from_id,
            "states": [s.value for s in chosen],
            "limit": limit,
        }
        rows = await self._db.rows(q.FINISHED_RUNS, params)
        return [
            FinishedRun(id=i, finished_at=f, state=RunState(s), task=t, held=bool(h))
            for i, f, s, t, h in rows
        ]

    async def purge_runs(self, runs: Sequence[FinishedRun]) -> Purged:
        """Delete the runs still due among ``runs`` in one short transaction."""
        if not runs:
            return Purged(removed=0, seconds=0.0)
        params = {"ids": [r.id for r in runs], "at": [r.finished_at for r in runs]}
        return await self._purge(q.PURGE_RUNS, params)

    async def purge_deliveries(
        self, subscription_id: int, state: DeliveryState, before: float, limit: int
    ) -> Purged:
        """Delete a batch of acked or dead deliveries of one subscription."""
        if not state.terminal:
            raise ValueError(f"a {state.value} delivery is live and is never purged")
        params = {
            "subscription": subscription_id,
            "state": state.value,
            "before": before,
            "limit": limit,
        }
        return await self._purge(q.PURGE_DELIVERIES, params)

    async def purge_events(self, topic: str, after: int, cut: int, limit: int) -> Purged:
        """Delete a batch of old events of ``topic`` that nothing needs."""
        params = {"topic": topic, "after": after, "cut": cut, "limit": limit}
        removed, seconds, read, last = await self._statement(q.PURGE_EVENTS, params)
        more = int(read) == limit and last is not None
        return Purged(
            removed=int(removed), seconds=float(seconds), last=int(last) if more else None
        )

    async def reclaim_space(self, pages: int) -> Purged:
        """Nothing to do: autovacuum makes the space of dead tuples reusable."""
        return Purged(removed=0, seconds=0.0)

    async def _purge(self, sql: str, params: Mapping[str, object]) -> Purged:
        removed, seconds = await self._statement(sql, params)
        return Purged(removed=int(removed), seconds=float(seconds))

    async def _statement(self, sql: str, params: Mapping[str, object]) -> tuple[Any, ...]:
        """One deleting statement in its own transaction (BEGIN, the statement and COMMIT
        in one pipeline); its second column says how long it ran on the server (see
        ``retention_sql._SPENT``). Not durable: a purge lost in a crash is done again
        by the next pass."""
        async with self._db.transaction(durable=False) as tx:
            rows = await tx.rows(sql, params)
        return tuple(rows[0])
