"""The evaluator: every few seconds, one process of the cluster reads the figures, steps every
alert (:func:`~.rules.step`) and tells the destinations.

Only the holder of the ``alerts`` role lease evaluates (the others find it held and wait), so
an alert fires once however many processes run the engine; its state is in the store, so the
process that takes over neither fires it again nor forgets to resolve it.

One evaluation (:meth:`AlertEngine.evaluate_once`):

1. reads the rules (the app's code rules and the stored ones), the alerts' states and the
   silences: three small reads;
2. reads each namespace's figures once for all its rules (:class:`~cronbus.services.alerts.
   AlertFigures`) and steps every alert;
3. saves the changed states with their history entries in one transaction *before* sending,
   so a crash while sending repeats a notice rather than losing it (at least once);
4. sends every notice still owed, to every destination at once; a destination that fails
   keeps it owed and is retried at the next evaluation, the others are not held back; the
   first failure of a notice and its late arrival are recorded in the history.

An evaluation where nothing changed writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from .destinations import Notice, Sender
from .lifecycle import step
from .records import AlertRule, AlertState, HistoryEntry, HistoryKind, Silence, silenced
from .rules import Figures, Finding, custom_findings, findings
from .settings import AlertSettings

if TYPE_CHECKING:
    from ...app import App
    from ...store.alert_ports import AlertKey

log = logging.getLogger("cronbus.alerts")
LEASE = "alerts"
"""The role lease's name."""
HISTORY_DAYS = 30.0
"""Days the alert history is kept."""
TRIM_EVERY = 3600.0
"""Seconds between two trims of the history."""

RuleKey = tuple[str, str]


class AlertEngine:
    """Evaluates every alert rule of the store and of ``app``'s code (see the module)."""

    def __init__(
        self,
        app: App,
        *,
        settings: AlertSettings | None = None,
        holder: str | None = None,
        sender: Sender | None = None,
    ) -> None:
        self.app = app
        self.settings = settings if settings is not None else AlertSettings.load()
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        """Who holds the lease: this engine."""
        self._sender = sender
        self._trimmed_at = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        """Evaluate every ``alert_seconds`` while holding the lease, until ``stop`` is set;
        then let go of the lease. A failed evaluation (the store unreachable...) is logged and
        tried again at the next tick."""
        given = self._sender
        async with self._sending() as sender:
            self._sender = sender  # one HTTP session for every evaluation of the loop
            try:
                while not stop.is_set():
                    await self.tick()
                    await self._wait(stop, self.settings.alert_seconds)
            finally:
                self._sender = given
                with contextlib.suppress(Exception):
                    await self.app.store.release_lease(LEASE, self.holder)

    async def tick(self) -> bool:
        """Take or renew the lease and, when held, evaluate once; True when it evaluated."""
        now = self.app.clock.now()
        try:
            held = await self.app.store.hold_lease(
                LEASE, self.holder, now, self.settings.alert_lease_seconds
            )
            if not held:
                return False
            await self.evaluate_once(now)
            if now - self._trimmed_at >= TRIM_EVERY:
                self._trimmed_at = now
                await self.app.store.trim_alert_history(now - HISTORY_DAYS * 86_400)
        except Exception:
            log.exception("alert evaluation failed", extra={"action": "alerts.error"})
            return False
        return True

    async def evaluate_once(self, now: float | None = None) -> list[HistoryEntry]:
        """Evaluate every rule at ``now`` (default: the app's clock) and send what is owed;
        returns the history entries recorded. Needs no lease (tests call it directly; the
        loop of :meth:`run` calls it only while holding one)."""
        now = self.app.clock.now() if now is None else now
        store = self.app.store
        rules = self._rules(await store.list_alert_rules())
        states = {(s.namespace, s.rule, s.subject): s for s in await store.list_alert_states()}
        silences = {(s.namespace, s.rule): s for s in await store.list_alert_silences()}
        changed, forget, history = await self._step_all(rules, states, silences, now)
        await store.save_alerts(changed, forget, history)
        for key in forget:
            states.pop(key, None)
        states.update({(s.namespace, s.rule, s.subject): s for s in changed})
        sent = await self._send_owed(rules, states, silences, now)
        return history + sent

    # -- stepping ------------------------------------------------------------------------------
    def _rules(self, stored: Iterable[AlertRule]) -> dict[RuleKey, AlertRule]:
        rules = {(r.namespace, r.name): r for r in stored}
        # A code rule wins over a stored one of the same name (the service refuses to add one).
        rules.update({(r.namespace, r.name): r for r in self.app.alerts.rules()})
        return rules

    async def _step_all(
        self,
        rules: dict[RuleKey, AlertRule],
        states: dict[AlertKey, AlertState],
        silences: dict[RuleKey, Silence],
        now: float,
    ) -> tuple[list[AlertState], list[AlertKey], list[HistoryEntry]]:
        changed: list[AlertState] = []
        forget: list[AlertKey] = [key for key in states if key[:2] not in rules]
        history: list[HistoryEntry] = []
        for namespace in sorted({ns for ns, _ in rules}):
            mine = [rule for (ns, _), rule in sorted(rules.items()) if ns == namespace]
            figures = await self._figures(namespace, mine, now)
            for rule in mine:
                found = await self._findings(rule, figures)
                if found is None:
                    continue  # its check failed: leave its alerts as they are
                held = {f.subject: f for f in found}
                quiet = silenced(rule, silences, now)
                mine_states = {
                    k[2]: s for k, s in states.items() if k[:2] == (namespace, rule.name)
                }
                for subject in sorted(set(held) | set(mine_states)):
                    previous = mine_states.get(subject)
                    result = step(rule, subject, previous, held.get(subject), now, silent=quiet)
                    if result.entry is not None:
                        history.append(result.entry)
                        _log(result.entry)
                    if result.state is None and previous is not None:
                        forget.append((namespace, rule.name, subject))
                    elif result.state is not None and result.state != previous:
                        changed.append(result.state)
        return changed, forget, history

    async def _figures(self, namespace: str, rules: list[AlertRule], now: float) -> Figures:
        from ...services.access import LOCAL
        from ...services.alerts import AlertFigures
        from ...services.context import Context

        context = Context(self.app, LOCAL, namespace)
        return await AlertFigures(context).gather(namespace, rules, now)

    async def _findings(self, rule: AlertRule, figures: Figures) -> list[Finding] | None:
        if rule.check is None:
            return findings(rule, figures)
        try:
            result = rule.check(figures)
            if inspect.isawaitable(result):
                result = await result
            return custom_findings(result)
        except Exception:
            log.exception(
                "the check of alert rule %s failed", rule.name, extra={"action": "alerts.check"}
            )
            return None

    # -- sending -------------------------------------------------------------------------------
    async def _send_owed(
        self,
        rules: dict[RuleKey, AlertRule],
        states: dict[AlertKey, AlertState],
        silences: dict[RuleKey, Silence],
        now: float,
    ) -> list[HistoryEntry]:
        owed = [
            (rules[key[:2]], state)
            for key, state in sorted(states.items())
            if state.pending and state.notice is not None and key[:2] in rules
        ]
        owed = [(rule, state) for rule, state in owed if not silenced(rule, silences, now)]
        if not owed:
            return []
        async with self._sending() as sender:
            results = await asyncio.gather(*(self._tell(sender, r, s, now) for r, s in owed))
        changed = [state for state, _ in results if state is not None]
        forget: list[AlertKey] = [
            (s.namespace, s.rule, s.subject)
            for (_, s), (new, _) in zip(owed, results, strict=True)
            if new is None
        ]
        history = [entry for _, entries in results for entry in entries]
        await self.app.store.save_alerts(changed, forget, history)
        return history

    async def _tell(
        self, sender: Sender, rule: AlertRule, state: AlertState, now: float
    ) -> tuple[AlertState | None, list[HistoryEntry]]:
        """Send ``state``'s notice to the destinations that owe it; the state after (None:
        forget it, resolved and told) and the history entries."""
        assert state.notice is not None
        notice = Notice(
            rule=rule.name,
            kind=rule.kind.value,
            namespace=state.namespace,
            subject=state.subject,
            notice=state.notice,
            message=state.notice_message or state.message,
            since=state.since,
            at=state.notified_at if state.notified_at is not None else now,
        )
        destinations = {d.key: d for d in rule.destinations}
        owed = [destinations[key] for key in state.pending if key in destinations]
        errors = await asyncio.gather(*(sender.send(d, notice) for d in owed))
        first = state.notified_at == now  # a retry is an evaluation after the decision
        entries = []
        still = []
        for destination, error in zip(owed, errors, strict=True):
            if error is not None:
                still.append(destination.key)
                # Warned once per notice: a destination that stays down is retried every
                # evaluation, and the history keeps its first failure.
                log.log(
                    logging.WARNING if first else logging.DEBUG,
                    "alert %s (%s): %s failed: %s",
                    rule.name,
                    state.subject,
                    destination.label,
                    error,
                    extra={"action": "alerts.failed"},
                )
                if first:
                    detail = f"{destination.label}: {error}"
                    entries.append(_entry(state, HistoryKind.FAILED, notice.message, now, detail))
            elif not first:
                entries.append(
                    _entry(state, HistoryKind.DELIVERED, notice.message, now, destination.label)
                )
        if not still and not state.firing:
            return None, entries
        return replace(state, pending=tuple(still), updated_at=now), entries

    @contextlib.asynccontextmanager
    async def _sending(self) -> AsyncIterator[Sender]:
        """The engine's sender: the one given or opened by :meth:`run`, else one for now."""
        if self._sender is not None:
            yield self._sender
            return
        async with Sender(self.settings) as sender:
            yield sender

    async def _wait(self, stop: asyncio.Event, seconds: float) -> None:
        """Wait ``seconds`` of the app's clock, or until ``stop``."""
        sleeping = asyncio.ensure_future(self.app.clock.sleep(seconds))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeping, stopping):
                task.cancel()


def _entry(
    state: AlertState, kind: HistoryKind, message: str, now: float, detail: str
) -> HistoryEntry:
    return HistoryEntry(
        at=now,
        rule=state.rule,
        subject=state.subject,
        namespace=state.namespace,
        kind=kind,
        message=message,
        detail=detail,
    )


def _log(entry: HistoryEntry) -> None:
    log.info(
        "alert %s %s (%s): %s",
        entry.rule,
        entry.kind.value,
        entry.subject,
        entry.message,
        extra={"action": f"alerts.{entry.kind.value}"},
    )
