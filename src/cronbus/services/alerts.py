"""Alerts: the stored rules (add, list, remove), the alerts that fire, silences, the history,
and the figures the evaluator reads.

Rules come from two places: the app's code (``app.alerts``, read-only here) and the store
(added with :meth:`AlertsService.add`, ``cronbus alerts add``). Names are unique across both
in a namespace's view: adding a stored rule named like a code rule of the app is refused.
Every listing masks destinations' secrets (:meth:`~cronbus.observability.alerts.AlertRule.public`).

:class:`AlertFigures` reads one namespace's figures for the evaluator: only those its rules
need, each with one store call for every rule (never a query per rule).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ConflictError, InvalidArgumentError, NotFoundError
from ..events.states import DeliveryState
from ..model import RunFilter
from ..observability.alerts.build import build_rule, parse_duration
from ..observability.alerts.records import (
    WHOLE,
    AlertRule,
    AlertState,
    Destination,
    HistoryEntry,
    RuleKind,
    Silence,
)
from ..observability.alerts.rules import (
    DEFAULT_FAILURES,
    DeadRuns,
    Figures,
    JobRuns,
    SubscriptionHealth,
)
from ..states import RunState
from ..validation import check_identifier
from .context import Context, naming
from .overview import failing_subscription
from .pages import Page, check_limit, decode_cursor, encode_cursor

LAG_WINDOW = 300.0
"""Seconds of job fires scheduler-lag rules measure the p99 over."""
LAG_SAMPLES = 1000
DEAD_SAMPLE = 200
"""The newest dead runs dead-runs rules look at (grouped by task)."""
_PUSHED = (DeliveryState.ACKED, DeliveryState.RETRY, DeliveryState.DEAD)
_QUEUES = (RuleKind.QUEUE_DEPTH, RuleKind.QUEUE_AGE, RuleKind.QUEUE_UNSERVED)
_WORKERS = (RuleKind.WORKER_LOST, RuleKind.QUEUE_UNSERVED)
_JOBS = (RuleKind.JOB_FAILURES, RuleKind.SCHEDULER_LAG)
_SUBSCRIPTIONS = (RuleKind.SUBSCRIPTION_FAILING, RuleKind.CIRCUIT_OPEN)


class AlertsService:
    """Alert rules, alerts, silences and history of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    # -- rules ---------------------------------------------------------------------------------
    async def rules(self) -> builtins.list[AlertRule]:
        """The namespace's rules, the app's code rules first, then the stored ones, by name."""
        self._c.read()
        code = self._code_rules()
        stored = await self._c.store.list_alert_rules(self._c.namespace)
        return code + stored

    async def add(
        self,
        kind: str | RuleKind,
        *,
        to: Sequence[Destination],
        name: str | None = None,
        repeat: float | str = 3600.0,
        **params: Any,
    ) -> AlertRule:
        """Store a new rule (see :func:`~cronbus.observability.alerts.build_rule`); a name
        taken by a stored rule or a code rule of the app is a
        :class:`~cronbus.errors.ConflictError`."""
        self._c.write()
        rule = build_rule(
            kind, name=name, to=to, repeat=repeat, namespace=self._c.namespace, **params
        )
        if rule.kind is RuleKind.CUSTOM:
            raise InvalidArgumentError(
                "custom rules are defined in code (@app.alert)", field="kind"
            )
        if self._c.app.alerts.get(rule.name) is not None:
            raise ConflictError(f"an alert rule named {rule.name!r} is defined in the app's code")
        stored = await self._c.store.put_alert_rule(rule, self._c.now())
        await self._c.audit("alerts.add", rule.name, {"kind": rule.kind.value, **rule.params()})
        return stored

    async def remove(self, name: str) -> None:
        """Delete a stored rule with its alerts and silence (its history stays); a code rule
        cannot be removed here (:class:`~cronbus.errors.ConflictError`)."""
        self._c.write()
        with naming("name"):
            check_identifier(name, "rule name")
        if self._c.app.alerts.get(name) is not None:
            raise ConflictError(
                f"the alert rule {name!r} is defined in the app's code; remove it there"
            )
        rule = await self._c.store.get_alert_rule(name)
        self._c.owns(rule.namespace, NotFoundError(f"no alert rule named {name!r}"))
        await self._c.store.delete_alert_rule(name)
        await self._c.audit("alerts.remove", name)

    # -- alerts, silences, history ---------------------------------------------------------
    async def firing(self) -> builtins.list[AlertState]:
        """The namespace's alerts that fire (or still owe a resolve notice)."""
        self._c.read()
        return await self._c.store.list_alert_states(self._c.namespace)

    async def silences(self, *, active: bool = True) -> builtins.list[Silence]:
        """The namespace's silences (those still running, unless ``active`` is False)."""
        self._c.read()
        found = await self._c.store.list_alert_silences(self._c.namespace)
        now = self._c.now()
        return [s for s in found if not active or s.until > now]

    async def silence(
        self, rule: str, duration: float | str, reason: str | None = None
    ) -> Silence | None:
        """Silence ``rule`` (``*``: every rule of the namespace) for ``duration`` (seconds or
        like ``2h``); 0 ends its silence (None returned). The rule must exist (in code or the
        store); its alerts keep changing state and are kept in the history."""
        self._c.write()
        seconds = parse_duration(duration, "duration")
        if rule != WHOLE:
            with naming("rule"):
                check_identifier(rule, "rule name")
            known = {r.name for r in await self.rules()}
            if rule not in known:
                raise NotFoundError(f"no alert rule named {rule!r}")
        if reason is not None and len(reason) > 500:
            raise InvalidArgumentError(
                "a silence's reason has at most 500 characters", field="reason"
            )
        now = self._c.now()
        if seconds == 0:
            await self._c.store.delete_alert_silence(self._c.namespace, rule)
            await self._c.audit("alerts.unsilence", rule)
            return None
        silence = Silence(
            namespace=self._c.namespace,
            rule=rule,
            until=now + seconds,
            reason=reason,
            created_at=now,
        )
        await self._c.store.set_alert_silence(silence)
        await self._c.audit("alerts.silence", rule, {"seconds": seconds, "reason": reason})
        return silence

    async def history(
        self, *, rule: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page[HistoryEntry]:
        """The namespace's alert history (of ``rule``), newest first, a page at a time."""
        self._c.read()
        limit = check_limit(limit)
        if rule is not None:
            with naming("rule"):
                check_identifier(rule, "rule name")
        before = None if cursor is None else decode_cursor(cursor, {"b": int})["b"]
        entries = await self._c.store.list_alert_history(
            namespace=self._c.namespace, rule=rule, before_id=before, limit=limit + 1
        )
        following = encode_cursor({"b": entries[limit - 1].id}) if len(entries) > limit else None
        return Page(items=entries[:limit], next=following)

    def _code_rules(self) -> builtins.list[AlertRule]:
        return [r for r in self._c.app.alerts.rules() if r.namespace == self._c.namespace]


class AlertFigures:
    """Reads the figures rules need, for the evaluator (no access check: it is the app's own
    process)."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def gather(self, namespace: str, rules: Iterable[AlertRule], now: float) -> Figures:
        """``namespace``'s figures for ``rules`` at ``now``: each kind of figure read once
        if some rule needs it (a custom rule needs them all)."""
        chosen = builtins.list(rules)
        kinds = {rule.kind for rule in chosen}
        if RuleKind.CUSTOM in kinds:
            kinds = set(RuleKind)
        store = self._c.store
        figures: dict[str, Any] = {"namespace": namespace, "now": now, "lag_window": LAG_WINDOW}
        if kinds & set(_QUEUES):
            figures["queues"] = tuple(await store.queue_depths(namespace))
        if kinds & set(_WORKERS):
            figures["workers"] = tuple(await store.list_workers(now, namespace=namespace))
        if RuleKind.DEAD_RUNS in kinds:
            figures["dead"] = await self._dead(namespace)
        if kinds & set(_JOBS):
            streak = max((r.count or DEFAULT_FAILURES for r in chosen), default=DEFAULT_FAILURES)
            figures["jobs"] = await self._jobs(namespace, streak, RuleKind.JOB_FAILURES in kinds)
        if RuleKind.SCHEDULER_LAG in kinds:
            lags = await store.fire_lags(namespace, now - LAG_WINDOW, LAG_SAMPLES)
            figures["fire_lags"] = tuple(lags)
        if kinds & set(_SUBSCRIPTIONS):
            figures["subscriptions"] = await self._subscriptions(
                namespace, circuits=RuleKind.CIRCUIT_OPEN in kinds
            )
        return Figures(**figures)

    async def _dead(self, namespace: str) -> tuple[DeadRuns, ...]:
        runs = await self._c.store.list_runs(
            RunFilter(states=[RunState.DEAD], namespace=namespace, limit=DEAD_SAMPLE)
        )
        by_task: dict[str, builtins.list[Any]] = {}
        for run in runs:  # newest first
            by_task.setdefault(run.task, []).append(run)
        return tuple(
            DeadRuns(
                task=task,
                queues=tuple(sorted({run.queue for run in found})),
                count=len(found),
                newest=found[0].id,
                error=None
                if found[0].error is None
                else f"{found[0].error.type}: {found[0].error.message}".splitlines()[0][:200],
            )
            for task, found in sorted(by_task.items())
        )

    async def _jobs(self, namespace: str, streak: int, runs: bool) -> tuple[JobRuns, ...]:
        store = self._c.store
        jobs = await store.list_jobs(namespace)
        # Room for live and cancelled runs between the finished ones the streak counts.
        recent = (
            await store.recent_job_runs(namespace, [j.id for j in jobs], 2 * streak + 2)
            if (runs and jobs)
            else {}
        )
        return tuple(
            JobRuns(
                name=job.name,
                states=tuple(state for _, state in recent.get(job.id, [])),
                next_fire_at=job.next_fire_at if job.active else None,
            )
            for job in jobs
        )

    async def _subscriptions(
        self, namespace: str, *, circuits: bool
    ) -> tuple[SubscriptionHealth, ...]:
        store = self._c.store
        found = []
        for sub in await store.list_subscriptions(namespace=namespace):
            counts = await store.count_deliveries(sub.name)
            reasons = []
            if sub.paused and sub.disabled_reason:
                reasons.append(f"disabled: {sub.disabled_reason}")
            for state, words in ((DeliveryState.RETRY, "retrying"), (DeliveryState.DEAD, "dead")):
                if counts.get(state):
                    reasons.append(f"{counts[state]} deliveries {words}")
            needed = sub.spec.policy.circuit_failures
            open_ = circuits and bool(reasons) and await self._circuit_open(sub.name, needed)
            found.append(
                SubscriptionHealth(
                    name=sub.name,
                    failing=failing_subscription(sub, counts),
                    reasons=tuple(reasons),
                    circuit_open=open_,
                    circuit_failures=needed,
                )
            )
        return tuple(found)

    async def _circuit_open(self, subscription: str, needed: int) -> bool:
        """As the console shows it: the newest ``needed`` pushed deliveries all failed (the
        dispatcher keeps its breaker in memory; this is what opens it)."""
        from ..events.records import DeliveryFilter

        listed = await self._c.store.list_deliveries(
            DeliveryFilter(subscription=subscription, states=_PUSHED, limit=2 * needed)
        )
        newest = sorted(listed, key=lambda d: d.updated_at, reverse=True)[:needed]
        failed = [d for d in newest if d.state is not DeliveryState.ACKED]
        return len(newest) == needed and len(failed) == needed
