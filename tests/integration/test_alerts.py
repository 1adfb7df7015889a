"""Each alert rule, on a real SQLite file and a PostgreSQL schema, with real receivers: it
fires once (a signed webhook that verifies, a chat message with "text", an email at a local
SMTP server), repeats after its interval and not before, resolves with a message, and tells
nobody while silenced (then is announced when the silence ends).

The engine is driven by ``evaluate_once`` with a fake clock: no sleeps, no polling; a notice
has reached its receiver when ``evaluate_once`` returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from cronbus.events.records import DeliveryOutcome, DeliveryResult, NewDelivery
from cronbus.job_specs import JobOptions
from cronbus.model import WorkerInfo, WorkerState
from cronbus.observability.alerts import HistoryKind
from cronbus.services import EventInput, Services, SubscriptionInput
from cronbus.services.alerts import AlertsService
from cronbus.states import AttemptOutcome
from cronbus.store.fencing import CALLER_CLOCK
from cronbus.store.logic import job_run
from cronbus.store.postgres import PostgresStore
from integration.test_alerts_fixtures import Rig, rig_fixture  # noqa: F401 (the fixture)
from integration.test_services_fixtures import end_run

REPEAT = 60.0


@dataclass
class Scenario:
    """How to make a rule hold, and stop holding, on the rig's store."""

    kind: str
    params: dict[str, Any]
    subject: str
    hold: Callable[[Rig, dict[str, Any]], Awaitable[None]]
    stop: Callable[[Rig, dict[str, Any]], Awaitable[None]]


def services(rig: Rig) -> Services:
    return Services(rig.app)


async def defer_work(rig: Rig, memo: dict[str, Any], count: int = 1) -> None:
    for _ in range(count):
        result = await services(rig).runs.defer("flaky", [])
        memo.setdefault("runs", []).append(result.run.id)


async def cancel_work(rig: Rig, memo: dict[str, Any]) -> None:
    for run_id in memo["runs"]:
        await rig.app.store.cancel(run_id, rig.clock.now())


async def aged_work(rig: Rig, memo: dict[str, Any]) -> None:
    await defer_work(rig, memo)
    rig.clock.advance(120)


async def lose_worker(rig: Rig, memo: dict[str, Any], age: float = 100.0) -> None:
    now = rig.clock.now()
    await rig.app.store.register_worker(
        WorkerInfo(
            id="w1",
            host="h",
            pid=1,
            queues=["*"],
            concurrency=1,
            version="t",
            started_at=now - age,
            heartbeat_at=now - age,
        )
    )


async def stop_worker(rig: Rig, memo: dict[str, Any]) -> None:
    await rig.app.store.set_worker_state("w1", WorkerState.STOPPED, rig.clock.now())


async def kill_run(rig: Rig, memo: dict[str, Any]) -> None:
    await defer_work(rig, memo)
    await end_run(rig.app, memo["runs"][-1], AttemptOutcome.FAILED)


async def requeue_run(rig: Rig, memo: dict[str, Any]) -> None:
    await rig.app.store.requeue(memo["runs"], rig.clock.now())


async def add_job(rig: Rig, name: str) -> None:
    await services(rig).jobs.create(name, "flaky", JobOptions(every=10.0))


async def job_runs(rig: Rig, name: str, outcome: AttemptOutcome, count: int) -> None:
    job = await rig.app.store.get_job(name)
    for n in range(count):
        now = rig.clock.now()
        (made,) = await rig.app.store.defer([job_run(job, now - n, now)], now)
        await end_run(rig.app, made.id, outcome)


async def failing_job(rig: Rig, memo: dict[str, Any]) -> None:
    await add_job(rig, "nightly")
    await job_runs(rig, "nightly", AttemptOutcome.FAILED, 2)


async def job_recovers(rig: Rig, memo: dict[str, Any]) -> None:
    await job_runs(rig, "nightly", AttemptOutcome.SUCCEEDED, 1)


async def overdue_job(rig: Rig, memo: dict[str, Any]) -> None:
    await add_job(rig, "report")
    rig.clock.advance(120)  # no scheduler runs: its fire at T0 + 10 is 110 s overdue


async def pause_job(rig: Rig, memo: dict[str, Any]) -> None:
    await services(rig).jobs.pause("report")


async def subscribe(rig: Rig, **policy: Any) -> None:
    s = services(rig)
    await s.topics.publish("orders", [EventInput(type="o", data=0)])
    await s.subscriptions.create(
        SubscriptionInput(
            name="hook", topic="orders", webhook="http://127.0.0.1:9/x", start="earliest", **policy
        )
    )


async def disable_subscription(rig: Rig, memo: dict[str, Any]) -> None:
    await subscribe(rig)
    await rig.app.store.set_subscription_paused("hook", True, "target gone (410)", rig.clock.now())


async def enable_subscription(rig: Rig, memo: dict[str, Any]) -> None:
    await rig.app.store.set_subscription_paused("hook", False, None, rig.clock.now())


async def push(rig: Rig, outcome: DeliveryOutcome, *, fresh: bool) -> None:
    """Push the subscription's deliveries as a dispatcher would, ending with ``outcome``."""
    store, now = rig.app.store, rig.clock.now()
    (lease,) = await store.acquire_subscriptions("d", now, 600.0, 10)
    if fresh:
        events = await store.read_events("orders", 0, 10)
        news = [NewDelivery(offset=e.offset, event_id=e.id, key=e.key) for e in events]
        assert await store.advance(lease, events[-1].offset, news, now)
    taken = await store.take_deliveries(lease, now, 10, 10)
    failed = outcome is DeliveryOutcome.FAILED
    results = [
        DeliveryResult(
            delivery_id=d.id,
            outcome=outcome,
            started_at=now,
            finished_at=now,
            status=503 if failed else 204,
            retry_at=now if failed else None,
        )
        for d in taken
    ]
    assert await store.finish_deliveries(lease, results, now) == [True] * len(taken)
    await store.release_subscriptions("d", ["hook"])


async def open_circuit(rig: Rig, memo: dict[str, Any]) -> None:
    await subscribe(rig, circuit_failures=2)
    await services(rig).topics.publish("orders", [EventInput(type="o", data=1)])
    await push(rig, DeliveryOutcome.FAILED, fresh=True)


async def close_circuit(rig: Rig, memo: dict[str, Any]) -> None:
    await push(rig, DeliveryOutcome.ACKED, fresh=False)


SCENARIOS = {
    "queue-depth": Scenario(
        "queue-depth",
        {"queue": "work", "threshold": 1},
        "work",
        lambda r, m: defer_work(r, m, 2),
        cancel_work,
    ),
    "queue-age": Scenario(
        "queue-age", {"queue": "work", "threshold": "1m"}, "work", aged_work, cancel_work
    ),
    "queue-unserved": Scenario("queue-unserved", {}, "work", defer_work, cancel_work),
    "worker-lost": Scenario("worker-lost", {}, "w1", lose_worker, stop_worker),
    "dead-runs": Scenario("dead-runs", {"task": "flaky"}, "flaky", kill_run, requeue_run),
    "job-failures": Scenario("job-failures", {"count": 2}, "nightly", failing_job, job_recovers),
    "scheduler-lag": Scenario("scheduler-lag", {"threshold": 30}, "*", overdue_job, pause_job),
    "subscription-failing": Scenario(
        "subscription-failing", {}, "hook", disable_subscription, enable_subscription
    ),
    "circuit-open": Scenario("circuit-open", {}, "hook", open_circuit, close_circuit),
}


def counts(rig: Rig) -> tuple[int, int, int]:
    hooks, texts, mails = rig.told()
    return len(hooks), len(texts), len(mails)


def on_caller_clock(rig: Rig) -> None:
    """Leases timed by the fake clock on PostgreSQL too (the subscription's, here)."""
    if isinstance(rig.app.store, PostgresStore):
        rig.app.store.lease_clock = CALLER_CLOCK


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_each_rule_fires_repeats_after_its_interval_and_resolves(
    rig: Rig,
    name: str,
) -> None:
    on_caller_clock(rig)
    scenario = SCENARIOS[name]
    memo: dict[str, Any] = {}
    rule = rig.app.alerts.add(scenario.kind, repeat=REPEAT, to=rig.destinations, **scenario.params)
    await rig.evaluate()
    assert counts(rig) == (0, 0, 0)  # nothing holds yet

    await scenario.hold(rig, memo)
    await rig.evaluate()
    hooks, texts, mails = rig.told()
    assert counts(rig) == (1, 1, 1)
    assert hooks[0]["type"] == "cronbus.alert.fired"
    assert hooks[0]["rule"] == rule.name
    assert hooks[0]["subject"] == scenario.subject
    assert hooks[0]["state"] == "firing"
    assert texts[0].startswith(f"[cronbus] FIRING {rule.name}")
    assert hooks[0]["message"] in texts[0]
    assert mails[0]["Subject"].startswith(f"[cronbus] FIRING {rule.name}")
    assert mails[0]["To"] == "ops@example.com"
    assert hooks[0]["message"] in mails[0].get_content()

    await rig.evaluate(REPEAT / 2)
    assert counts(rig) == (1, 1, 1)  # still holding, before the interval: nothing new
    await rig.evaluate(REPEAT / 2 + 1)
    hooks, texts, _ = rig.told()
    assert counts(rig) == (2, 2, 2)
    assert hooks[1]["type"] == "cronbus.alert.repeated"
    assert texts[1].startswith(f"[cronbus] STILL FIRING {rule.name}")

    await scenario.stop(rig, memo)
    await rig.evaluate()
    hooks, texts, mails = rig.told()
    assert counts(rig) == (3, 3, 3)
    assert hooks[2]["type"] == "cronbus.alert.resolved"
    assert hooks[2]["state"] == "resolved"
    assert hooks[2]["message"].startswith("resolved: ")
    assert texts[2].startswith(f"[cronbus] RESOLVED {rule.name}")
    assert mails[2]["Subject"].startswith(f"[cronbus] RESOLVED {rule.name}")
    # Same notice, same id on every destination; a new id per notice.
    assert len({h["id"] for h in hooks}) == 3

    await rig.evaluate(REPEAT * 3)
    assert counts(rig) == (3, 3, 3)
    assert await rig.app.store.list_alert_states() == []
    history = await AlertsService(services(rig).context).history()
    assert [e.kind for e in history.items] == [
        HistoryKind.RESOLVED,
        HistoryKind.REPEATED,
        HistoryKind.FIRED,
    ]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_each_rule_tells_nobody_while_silenced_and_resumes_after(
    rig: Rig,
    name: str,
) -> None:
    on_caller_clock(rig)
    scenario = SCENARIOS[name]
    memo: dict[str, Any] = {}
    rule = rig.app.alerts.add(scenario.kind, repeat=REPEAT, to=rig.destinations, **scenario.params)
    alerts = AlertsService(services(rig).context)
    silence = await alerts.silence(rule.name, "5m", reason="maintenance")
    assert silence is not None

    await scenario.hold(rig, memo)
    await rig.evaluate()
    await rig.evaluate(REPEAT + 1)  # past the repeat interval: still silent
    assert counts(rig) == (0, 0, 0)
    entries = (await alerts.history()).items
    assert [(e.kind, e.detail) for e in entries] == [(HistoryKind.FIRED, "silenced")]

    rig.clock.advance(silence.until - rig.clock.now())
    await rig.evaluate()
    hooks, _, _ = rig.told()
    assert counts(rig) == (1, 1, 1)  # announced once the silence ends
    assert hooks[0]["type"] == "cronbus.alert.fired"
