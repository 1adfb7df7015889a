"""The pure core of alerting, part two: the life of one alert.

:func:`step` takes an alert's previous :class:`~.records.AlertState` and whether its rule holds
now for its subject (a :class:`~.rules.Finding`, or None), and decides its next state and what
to tell: it **fires** once, **repeats** at most every ``rule.repeat`` seconds while it holds,
**resolves** with a message when it stops holding, and tells nobody while its rule is silenced
(a silenced alert that still holds when the silence ends is announced then; one that resolves
unannounced ends in the history only). No I/O, no clock: the evaluator passes ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .records import (
    AlertRule,
    AlertState,
    HistoryEntry,
    HistoryKind,
    NoticeKind,
    RuleKind,
)
from .rules import Finding

_RESOLVED = {
    RuleKind.JOB_FAILURES: "job {subject} ran without failing again",
    RuleKind.DEAD_RUNS: "task {subject}: no dead runs waiting any more",
    RuleKind.QUEUE_DEPTH: "queue {subject}: back to {threshold} queued runs or fewer",
    RuleKind.QUEUE_AGE: "queue {subject}: no queued run waits longer than {threshold} s",
    RuleKind.SCHEDULER_LAG: "scheduler lag back under {threshold} s",
    RuleKind.SUBSCRIPTION_FAILING: "subscription {subject} is no longer failing",
    RuleKind.CIRCUIT_OPEN: "subscription {subject}: circuit closed",
    RuleKind.WORKER_LOST: "worker {subject} is no longer lost (back, or pruned)",
    RuleKind.QUEUE_UNSERVED: "queue {subject}: a live worker serves it, or it is empty",
}


def resolved_message(rule: AlertRule, subject: str) -> str:
    """What a resolve notice says."""
    text = _RESOLVED.get(rule.kind, "{rule} no longer holds for {subject}")
    threshold = "0" if rule.threshold is None else f"{rule.threshold:g}"
    return f"resolved: {text.format(subject=subject, threshold=threshold, rule=rule.name)}"


# -- the life of an alert ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Step:
    """An alert's next state (None: forget it) and what to record in the history (if any).

    The state's ``notice`` and ``pending`` say what to send, when they changed."""

    state: AlertState | None
    entry: HistoryEntry | None = None


def step(
    rule: AlertRule,
    subject: str,
    previous: AlertState | None,
    finding: Finding | None,
    now: float,
    *,
    silent: bool,
) -> Step:
    """The next step of the alert ``(rule, subject)``: see the module's docstring."""
    if finding is not None:
        if previous is None or not previous.firing:
            start = AlertState(
                rule=rule.name,
                subject=subject,
                namespace=rule.namespace,
                firing=True,
                since=now,
                message=finding.message,
                updated_at=now,
            )
            return _tell(rule, start, NoticeKind.FIRED, finding.message, now, silent=silent)
        if silent:
            return Step(previous)
        if previous.notified_at is None:  # fired while silenced: announce it now
            return _tell(rule, previous, NoticeKind.FIRED, finding.message, now, silent=False)
        if rule.repeat > 0 and now - previous.notified_at >= rule.repeat:
            return _tell(rule, previous, NoticeKind.REPEATED, finding.message, now, silent=False)
        return Step(previous)
    if previous is None or not previous.firing:
        return Step(previous)  # nothing, or a resolve notice still owed to some destination
    message = resolved_message(rule, subject)
    if silent or previous.notified_at is None:
        # Nobody was told it fired (or nobody may be told now): it ends in the history only.
        why = "silenced" if silent else "it was never announced"
        return Step(None, _entry(rule, subject, HistoryKind.RESOLVED, message, now, why))
    ended = replace(previous, firing=False, message=message)
    return _tell(rule, ended, NoticeKind.RESOLVED, message, now, silent=False)


def _tell(
    rule: AlertRule,
    state: AlertState,
    notice: NoticeKind,
    message: str,
    now: float,
    *,
    silent: bool,
) -> Step:
    """``state`` with ``notice`` owed to every destination (none when ``silent``)."""
    kind = HistoryKind(notice.value)
    if silent:
        entry = _entry(rule, state.subject, kind, message, now, "silenced")
        return Step(replace(state, message=message, updated_at=now), entry)
    told = replace(
        state,
        message=message,
        notified_at=now,
        notice=notice,
        notice_message=message,
        pending=tuple(d.key for d in rule.destinations),
        updated_at=now,
    )
    labels = ", ".join(d.label for d in rule.destinations) or "no destination"
    return Step(told, _entry(rule, state.subject, kind, message, now, f"to {labels}"))


def _entry(
    rule: AlertRule, subject: str, kind: HistoryKind, message: str, now: float, detail: str
) -> HistoryEntry:
    return HistoryEntry(
        at=now,
        rule=rule.name,
        subject=subject,
        namespace=rule.namespace,
        kind=kind,
        message=message,
        detail=detail,
    )
