"""``/v1/alerts``: the namespace's alert rules, what fires and the silences running, and the
alert history. Read-only: rules are added in code or with ``cronbus alerts add`` on the store.
Destinations are shown masked (no URL credential, signing secret or password leaves)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Query, Request, Response

from ...observability.alerts.records import AlertRule, AlertState, HistoryEntry, Silence
from ...services.alerts import AlertsService
from ..auth import Caller
from ..pagination import LIMIT_DEFAULT, Cursor, Limit, PageOut, page_body
from .common import router

alerts = router("alerts")


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertRuleOut:
    """An alert rule, its destinations masked."""

    name: str
    namespace: str
    kind: str
    params: dict[str, Any]
    repeat: float
    """Seconds between notices while an alert holds (0: once)."""
    source: str
    """``code`` (the app's) or ``store``."""
    destinations: list[dict[str, Any]]
    created_at: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertOut:
    """An alert: a rule holding for a subject (or resolved, a notice still owed)."""

    rule: str
    subject: str
    firing: bool
    since: float
    message: str
    notified_at: float | None = None
    pending: int = 0
    """Destinations that still owe the latest notice (they are retried)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SilenceOut:
    """A silence running: no notice of ``rule`` (``*``: every rule) until ``until``."""

    rule: str
    until: float
    reason: str | None = None
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertsOut:
    """The namespace's rules, the alerts firing and the silences running."""

    rules: list[AlertRuleOut]
    firing: list[AlertOut]
    silences: list[SilenceOut]


@alerts.get("/alerts", summary="Alert rules, alerts firing, silences")
async def list_alerts(services: Caller) -> AlertsOut:
    """The namespace's alert rules (the server app's code rules, then the stored ones), the
    alerts that fire, and the silences running."""
    service = AlertsService(services.context)
    rules = await service.rules()
    firing = await service.firing()
    silences = await service.silences()
    return AlertsOut(
        rules=[_rule(rule) for rule in rules],
        firing=[_alert(state) for state in firing],
        silences=[_silence(silence) for silence in silences],
    )


@alerts.get("/alerts/history", summary="The alert history", response_model=PageOut[HistoryEntry])
async def alert_history(
    request: Request,
    response: Response,
    services: Caller,
    rule: Annotated[
        str | None,
        Query(pattern=r"^[A-Za-z0-9_.:-]{1,200}$", description="Only this rule's entries."),
    ] = None,
    limit: Limit = LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Alerts fired, repeated and resolved, and destinations that failed (and were told
    later), newest first."""
    page = await AlertsService(services.context).history(rule=rule, limit=limit, cursor=cursor)
    return page_body(request, response, page)


def _rule(rule: AlertRule) -> AlertRuleOut:
    shown = rule.public()
    return AlertRuleOut(
        name=rule.name,
        namespace=rule.namespace,
        kind=rule.kind.value,
        params=shown["params"],
        repeat=rule.repeat,
        source=rule.source,
        destinations=shown["destinations"],
        created_at=rule.created_at,
    )


def _alert(state: AlertState) -> AlertOut:
    return AlertOut(
        rule=state.rule,
        subject=state.subject,
        firing=state.firing,
        since=state.since,
        message=state.message,
        notified_at=state.notified_at,
        pending=len(state.pending),
    )


def _silence(silence: Silence) -> SilenceOut:
    return SilenceOut(
        rule=silence.rule, until=silence.until, reason=silence.reason, created_at=silence.created_at
    )
