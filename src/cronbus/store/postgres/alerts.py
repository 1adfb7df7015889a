"""The alert tables in the PostgreSQL store (:class:`~cronbus.store.alert_ports.AlertStore`).

One evaluator writes at a time (it holds the ``alerts`` role lease); an evaluation's changes
(states written and forgotten, history appended) are one pipelined transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from psycopg.types.json import Jsonb

from ...errors import ConflictError, NotFoundError
from ...observability.alerts.records import AlertRule, AlertState, HistoryEntry, Silence
from ..alert_ports import (
    NO_CURSOR,
    AlertKey,
    history_from_row,
    history_params,
    rule_from_row,
    silence_from_row,
    state_from_row,
    state_params,
)
from ..event_rows import decoded
from . import alerts_sql as aq
from .connection import Connected, Row


def _rule(row: Row) -> AlertRule:
    return rule_from_row(row, decoded(row[2]))


def _state(row: Row) -> AlertState:
    return state_from_row(row, row[9] or ())


class PostgresAlerts(Connected):
    """Alerting's tables (:class:`~cronbus.store.alert_ports.AlertStore`) in PostgreSQL."""

    async def put_alert_rule(self, rule: AlertRule, now: float) -> AlertRule:
        """Store a new rule; :class:`~cronbus.errors.ConflictError` if the name is taken."""
        params = (rule.name, rule.namespace, rule.kind.value, Jsonb(rule.to_json()), now, now)
        if not await self._db.execute(aq.INSERT_RULE, params):
            raise ConflictError(f"an alert rule named {rule.name!r} exists")
        return replace(rule, created_at=now, source="store", check=None)

    async def get_alert_rule(self, name: str) -> AlertRule:
        """One stored rule, or :class:`~cronbus.errors.NotFoundError`."""
        row = await self._db.one(aq.GET_RULE, (name,))
        if row is None:
            raise NotFoundError(f"no alert rule named {name!r}")
        return _rule(row)

    async def list_alert_rules(self, namespace: str | None = None) -> list[AlertRule]:
        """The stored rules (of ``namespace``), by name."""
        if namespace is None:
            rows = await self._db.rows(aq.LIST_RULES)
        else:
            rows = await self._db.rows(aq.LIST_RULES_OF, (namespace,))
        return [_rule(row) for row in rows]

    async def delete_alert_rule(self, name: str) -> None:
        """Delete a stored rule, its states and its silence (its history stays)."""
        if await self._db.one(aq.DELETE_RULE, {"name": name}) is None:
            raise NotFoundError(f"no alert rule named {name!r}")

    async def list_alert_states(self, namespace: str | None = None) -> list[AlertState]:
        """Every alert that fires or owes a notice (of ``namespace``)."""
        if namespace is None:
            rows = await self._db.rows(aq.LIST_STATES)
        else:
            rows = await self._db.rows(aq.LIST_STATES_OF, (namespace,))
        return [_state(row) for row in rows]

    async def save_alerts(
        self,
        states: Sequence[AlertState],
        forget: Sequence[AlertKey],
        history: Sequence[HistoryEntry],
    ) -> None:
        """Write states, forget others and append history, in one transaction."""
        if not (states or forget or history):
            return
        async with self._db.transaction() as tx:
            for state in states:
                params = list(state_params(state))
                params[9] = list(state.pending)
                await tx.queue(aq.PUT_STATE, params)
            for key in forget:
                await tx.queue(aq.DELETE_STATE, key)
            for entry in history:
                await tx.queue(aq.INSERT_HISTORY, history_params(entry))

    async def set_alert_silence(self, silence: Silence) -> None:
        """Silence a rule (or ``*``) of a namespace, replacing any silence of it."""
        params = (
            silence.namespace,
            silence.rule,
            silence.until,
            silence.reason,
            silence.created_at,
        )
        await self._db.execute(aq.PUT_SILENCE, params)

    async def delete_alert_silence(self, namespace: str, rule: str) -> bool:
        """End a silence; False when there was none."""
        return await self._db.execute(aq.DELETE_SILENCE, (namespace, rule)) > 0

    async def list_alert_silences(self, namespace: str | None = None) -> list[Silence]:
        """Every silence (of ``namespace``), by namespace and rule."""
        if namespace is None:
            rows = await self._db.rows(aq.LIST_SILENCES)
        else:
            rows = await self._db.rows(aq.LIST_SILENCES_OF, (namespace,))
        return [silence_from_row(row) for row in rows]

    async def list_alert_history(
        self,
        *,
        namespace: str | None = None,
        rule: str | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[HistoryEntry]:
        """History entries, newest first."""
        params = {
            "namespace": namespace,
            "rule": rule,
            "before": NO_CURSOR if before_id is None else before_id,
            "limit": limit,
        }
        if namespace is None:
            sql = aq.LIST_HISTORY if rule is None else aq.LIST_HISTORY_OF_ANY_RULE
        else:
            sql = aq.LIST_HISTORY_OF if rule is None else aq.LIST_HISTORY_OF_RULE
        return [history_from_row(row) for row in await self._db.rows(sql, params)]

    async def trim_alert_history(self, before: float, limit: int = 1000) -> int:
        """Delete at most ``limit`` entries older than ``before``."""
        return await self._db.execute(aq.TRIM_HISTORY, (before, limit))
