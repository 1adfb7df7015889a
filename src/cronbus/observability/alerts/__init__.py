"""Alerts: rules over the store's figures, told to webhooks, email and chat.

A rule (``app.alerts.add(...)``, ``@app.alert(...)`` for a check function of your own, or
``cronbus alerts add``) watches one condition: a job failing N times in a row, dead runs, a
queue's depth or oldest age, the scheduler's lag, a failing subscription or an open circuit,
a lost worker, a queue no live worker serves. One process of the cluster evaluates every rule
every few seconds (:class:`~.engine.AlertEngine`, holding the ``alerts`` role lease); each
alert fires once, repeats at most every ``repeat`` seconds while it holds, resolves with a
message, can be silenced for a time, and is kept in the history.

The modules: :mod:`.records` (the values), :mod:`.build` (checked builders), :mod:`.rules`
and :mod:`.lifecycle` (the pure decisions), :mod:`.destinations` (sending), :mod:`.engine`
(the evaluator loop), :mod:`.registry` (the app's code rules), :mod:`.settings`
(``CRONBUS_ALERT_*``, ``CRONBUS_SMTP_*``).
"""

from __future__ import annotations

from .build import build_rule, chat, email, parse_duration, webhook
from .records import (
    AlertRule,
    AlertState,
    Destination,
    DestinationKind,
    HistoryEntry,
    HistoryKind,
    NoticeKind,
    RuleKind,
    Silence,
)

__all__ = [
    "AlertRule",
    "AlertState",
    "Destination",
    "DestinationKind",
    "HistoryEntry",
    "HistoryKind",
    "NoticeKind",
    "RuleKind",
    "Silence",
    "build_rule",
    "chat",
    "email",
    "parse_duration",
    "webhook",
]
