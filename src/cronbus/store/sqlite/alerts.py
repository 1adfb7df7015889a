"""The alert tables in the SQLite store (:class:`~cronbus.store.alert_ports.AlertStore`).

One evaluator writes at a time (it holds the ``alerts`` role lease); an evaluation's changes
(states written and forgotten, history appended) are one write transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace

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
from . import alerts_sql as aq
from .connection import Connected
from .rows import Row, execute


def _rule(row: Row) -> AlertRule:
    return rule_from_row(row, json.loads(row[2]))


def _state(row: Row) -> AlertState:
    return state_from_row(row, json.loads(row[9]))


class SqliteAlerts(Connected):
    """Alerting's tables (:class:`~cronbus.store.alert_ports.AlertStore`) in SQLite."""

    async def put_alert_rule(self, rule: AlertRule, now: float) -> AlertRule:
        """Store a new rule; :class:`~cronbus.errors.ConflictError` if the name is taken."""
        body = json.dumps(rule.to_json())
        params = (rule.name, rule.namespace, rule.kind.value, body, now, now)
        if not await self._transact(execute, aq.INSERT_RULE, params, inline="write"):
            raise ConflictError(f"an alert rule named {rule.name!r} exists")
        return replace(rule, created_at=now, source="store", check=None)

    async def get_alert_rule(self, name: str) -> AlertRule:
        """One stored rule, or :class:`~cronbus.errors.NotFoundError`."""
        row = await self._one(aq.GET_RULE, (name,), inline="read")
        if row is None:
            raise NotFoundError(f"no alert rule named {name!r}")
        return _rule(row)

    async def list_alert_rules(self, namespace: str | None = None) -> list[AlertRule]:
        """The stored rules (of ``namespace``), by name."""
        if namespace is None:
            rows = await self._rows(aq.LIST_RULES, inline="read")
        else:
            rows = await self._rows(aq.LIST_RULES_OF, (namespace,), inline="read")
        return [_rule(row) for row in rows]

    async def delete_alert_rule(self, name: str) -> None:
        """Delete a stored rule, its states and its silence (its history stays)."""
        if not await self._transact(_delete_rule, name, inline="write"):
            raise NotFoundError(f"no alert rule named {name!r}")

    async def list_alert_states(self, namespace: str | None = None) -> list[AlertState]:
        """Every alert that fires or owes a notice (of ``namespace``)."""
        if namespace is None:
            rows = await self._rows(aq.LIST_STATES, inline="read")
        else:
            rows = await self._rows(aq.LIST_STATES_OF, (namespace,), inline="read")
        return [_state(row) for row in rows]

    async def save_alerts(
        self,
        states: Sequence[AlertState],
        forget: Sequence[AlertKey],
        history: Sequence[HistoryEntry],
    ) -> None:
        """Write states, forget others and append history, in one transaction."""
        if states or forget or history:
            await self._transact(_save, states, forget, history)

    async def set_alert_silence(self, silence: Silence) -> None:
        """Silence a rule (or ``*``) of a namespace, replacing any silence of it."""
        params = (
            silence.namespace,
            silence.rule,
            silence.until,
            silence.reason,
            silence.created_at,
        )
        await self._transact(execute, aq.PUT_SILENCE, params, inline="write")

    async def delete_alert_silence(self, namespace: str, rule: str) -> bool:
        """End a silence; False when there was none."""
        deleted = await self._transact(
            execute, aq.DELETE_SILENCE, (namespace, rule), inline="write"
        )
        return deleted > 0

    async def list_alert_silences(self, namespace: str | None = None) -> list[Silence]:
        """Every silence (of ``namespace``), by namespace and rule."""
        if namespace is None:
            rows = await self._rows(aq.LIST_SILENCES, inline="read")
        else:
            rows = await self._rows(aq.LIST_SILENCES_OF, (namespace,), inline="read")
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
        return [history_from_row(row) for row in await self._rows(sql, params, inline="read")]

    async def trim_alert_history(self, before: float, limit: int = 1000) -> int:
        """Delete at most ``limit`` entries older than ``before``."""
        return await self._transact(execute, aq.TRIM_HISTORY, (before, limit), durable=False)


def _delete_rule(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(aq.DELETE_RULE, (name,)).fetchone()
    if row is None:
        return False
    conn.execute(aq.DELETE_RULE_STATES, (row[0], name))
    conn.execute(aq.DELETE_RULE_SILENCE, (row[0], name))
    return True


def _save(
    conn: sqlite3.Connection,
    states: Sequence[AlertState],
    forget: Sequence[AlertKey],
    history: Sequence[HistoryEntry],
) -> None:
    rows = []
    for state in states:
        params = list(state_params(state))
        params[3] = int(state.firing)
        params[9] = json.dumps(list(state.pending))
        rows.append(params)
    conn.executemany(aq.PUT_STATE, rows)
    conn.executemany(aq.DELETE_STATE, forget)
    conn.executemany(aq.INSERT_HISTORY, [history_params(entry) for entry in history])
