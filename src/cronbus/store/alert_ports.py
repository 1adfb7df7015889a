"""The store's alerting role, as a protocol: stored rules, alert states, silences, history.

The store keeps what alerting must not forget across processes: the rules added through the
CLI or the services (the app's code rules live in its code), the state of each alert (so the
process that takes over evaluation neither fires an alert again nor forgets to resolve it),
silences and the history. The evaluator (:mod:`cronbus.observability.alerts.engine`) decides
everything else; one process evaluates at a time (a role lease), so states need no fencing.
Callers pass ``now``, as everywhere in the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..observability.alerts.records import (
    AlertRule,
    AlertState,
    HistoryEntry,
    HistoryKind,
    NoticeKind,
    Silence,
)

__all__ = ["AlertKey", "AlertStore"]

AlertKey = tuple[str, str, str]
"""An alert's name in the store: ``(namespace, rule, subject)``."""


class AlertStore(Protocol):
    """Alerting's tables (see the module's docstring)."""

    async def put_alert_rule(self, rule: AlertRule, now: float) -> AlertRule:
        """Store a new rule (its ``created_at`` set to ``now``);
        :class:`~cronbus.errors.ConflictError` if a rule of that name exists (names are
        unique in the store, whatever the namespace)."""
        ...

    async def get_alert_rule(self, name: str) -> AlertRule:
        """One stored rule, or :class:`~cronbus.errors.NotFoundError`."""
        ...

    async def list_alert_rules(self, namespace: str | None = None) -> list[AlertRule]:
        """The stored rules (of ``namespace``; None: of all), by name."""
        ...

    async def delete_alert_rule(self, name: str) -> None:
        """Delete a stored rule with its alert states and silence, in one transaction
        (:class:`~cronbus.errors.NotFoundError` if unknown); its history stays."""
        ...

    async def list_alert_states(self, namespace: str | None = None) -> list[AlertState]:
        """Every alert that fires or still owes a notice (of ``namespace``; None: of all), by
        namespace, rule and subject."""
        ...

    async def save_alerts(
        self,
        states: Sequence[AlertState],
        forget: Sequence[AlertKey],
        history: Sequence[HistoryEntry],
    ) -> None:
        """In one transaction: write ``states`` (insert or replace), delete the states named
        by ``forget``, and append ``history`` (each entry gets an id, in order)."""
        ...

    async def set_alert_silence(self, silence: Silence) -> None:
        """Silence a rule (or ``*``) of a namespace until ``silence.until``, replacing any
        silence of it."""
        ...

    async def delete_alert_silence(self, namespace: str, rule: str) -> bool:
        """End a silence; False when there was none."""
        ...

    async def list_alert_silences(self, namespace: str | None = None) -> list[Silence]:
        """Every silence (of ``namespace``; None: of all), ended ones too, by namespace and
        rule."""
        ...

    async def list_alert_history(
        self,
        *,
        namespace: str | None = None,
        rule: str | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[HistoryEntry]:
        """History entries, newest first (``before_id``: the keyset of the next page)."""
        ...

    async def trim_alert_history(self, before: float, limit: int = 1000) -> int:
        """Delete at most ``limit`` history entries older than ``before`` (the oldest first);
        how many were deleted. Small batches keep the write lock short."""
        ...


# -- what both backends share --------------------------------------------------------------
STATE_COLUMNS = """namespace, rule, subject, firing, since, message, notified_at, notice,
    notice_message, pending, updated_at"""
HISTORY_COLUMNS = "id, at, namespace, rule, subject, kind, message, detail"
SILENCE_COLUMNS = "namespace, rule, until, reason, created_at"
RULE_COLUMNS = "name, namespace, body, created_at"
NO_CURSOR = 2**63 - 1
"""``before_id`` when none is given: above every id."""


def state_from_row(row: Sequence[Any], pending: Sequence[str]) -> AlertState:
    """An :class:`AlertState` from :data:`STATE_COLUMNS` (``pending`` decoded by the caller:
    JSON text in SQLite, an array in PostgreSQL)."""
    return AlertState(
        namespace=row[0],
        rule=row[1],
        subject=row[2],
        firing=bool(row[3]),
        since=float(row[4]),
        message=row[5],
        notified_at=None if row[6] is None else float(row[6]),
        notice=None if row[7] is None else NoticeKind(row[7]),
        notice_message=row[8],
        pending=tuple(pending),
        updated_at=float(row[10]),
    )


def state_params(state: AlertState) -> tuple[Any, ...]:
    """:data:`STATE_COLUMNS`' values for ``state``, ``pending`` as a tuple (encoded by the
    caller)."""
    return (
        state.namespace,
        state.rule,
        state.subject,
        state.firing,
        state.since,
        state.message,
        state.notified_at,
        None if state.notice is None else state.notice.value,
        state.notice_message,
        state.pending,
        state.updated_at,
    )


def history_from_row(row: Sequence[Any]) -> HistoryEntry:
    """A :class:`HistoryEntry` from :data:`HISTORY_COLUMNS`."""
    return HistoryEntry(
        id=int(row[0]),
        at=float(row[1]),
        namespace=row[2],
        rule=row[3],
        subject=row[4],
        kind=HistoryKind(row[5]),
        message=row[6],
        detail=row[7],
    )


def history_params(entry: HistoryEntry) -> tuple[Any, ...]:
    """The values of :data:`HISTORY_COLUMNS` but ``id`` for ``entry``."""
    return (
        entry.at,
        entry.namespace,
        entry.rule,
        entry.subject,
        entry.kind.value,
        entry.message,
        entry.detail,
    )


def silence_from_row(row: Sequence[Any]) -> Silence:
    """A :class:`Silence` from :data:`SILENCE_COLUMNS`."""
    return Silence(
        namespace=row[0], rule=row[1], until=float(row[2]), reason=row[3], created_at=row[4]
    )


def rule_from_row(row: Sequence[Any], body: Mapping[str, Any]) -> AlertRule:
    """A stored :class:`AlertRule` from :data:`RULE_COLUMNS` (``body`` decoded by the caller)."""
    return AlertRule.from_json(row[0], row[1], body, float(row[3]))
