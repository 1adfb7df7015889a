"""The retention role, on both stores: per-task and per-subscription keeps over the store's
defaults, events of topics without a retention of their own, and the loop: one holder of the
``retention`` lease at a time, a pass per period of the app's (fake) clock, the lease given up
when it stops."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contract.pg import pg_store_url
from cronbus import App
from cronbus.config import Settings
from cronbus.errors import RunNotFoundError
from cronbus.events.records import (
    DeliveryOutcome,
    DeliveryResult,
    NewDelivery,
    NewEvent,
    SubscriptionSpec,
)
from cronbus.events.specs import build_policy
from cronbus.events.states import DeliveryState
from cronbus.model import ClaimRequest, ErrorInfo, NewRun, Outcome, QueueShare
from cronbus.observability.retention import LEASE, PurgeReport, Retention
from cronbus.observability.retention_policy import rules_for
from cronbus.states import AttemptOutcome
from cronbus.store import Store
from cronbus.testing import FakeClock

T0 = 1_700_000_000.0
HOUR = 3_600.0
HOOK = {"kind": "webhook", "url": "http://127.0.0.1:9/h"}


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return await pg_store_url(request)
    return f"sqlite:///{tmp_path / 'retention.db'}"


def make_app(url: str) -> App:
    app = App(store=url, clock=FakeClock(T0))
    app.settings = Settings(keep_succeeded_seconds=10 * HOUR, keep_events_seconds=HOUR)

    @app.task(name="chatty", keep={"succeeded": HOUR})
    def chatty() -> None: ...

    @app.task(name="audit", keep="30d")
    def audit() -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    return app


async def ended(store: Store, task: str, at: float, ok: bool = True) -> int:
    (done,) = await store.defer([NewRun(task=task, queue="q", eta=at)], at)
    request = ClaimRequest(
        worker_id="w", queues=[QueueShare(name="q", limit=1)], limit=1, lease_seconds=30
    )
    (claimed,) = await store.claim(request, at)
    outcome = Outcome(
        run_id=claimed.run_id,
        attempt_id=claimed.attempt_id,
        outcome=AttemptOutcome.SUCCEEDED if ok else AttemptOutcome.FAILED,
        error=None if ok else ErrorInfo(type="E", message="x"),
    )
    await store.complete([outcome], at)
    return done.id


async def exists(store: Store, run_id: int) -> bool:
    try:
        await store.get_run(run_id)
    except RunNotFoundError:
        return False
    return True


async def test_tasks_keep_their_own_time_over_the_store_default(url: str) -> None:
    app = make_app(url)
    async with app:
        store = app.store
        chatty = await ended(store, "chatty", T0)
        chatty_dead = await ended(store, "chatty", T0, ok=False)
        audit = await ended(store, "audit", T0)
        plain = await ended(store, "plain", T0)
        plain_late = await ended(store, "plain", T0 + 9 * HOUR)
        retention = Retention.for_app(app)
        clock = app.clock
        assert isinstance(clock, FakeClock)

        clock.advance(2 * HOUR)
        report = await retention.pass_once()
        assert report.runs == 1
        assert not await exists(store, chatty)
        # Its dead run is not said by the task: the store's default (30 days) keeps it.
        assert await exists(store, chatty_dead)

        clock.advance(9 * HOUR)  # T0 + 11 h: plain's 10 hours are over, not audit's 30 days
        report = await retention.pass_once()
        assert report.runs == 1
        assert not await exists(store, plain)
        assert all([await exists(store, r) for r in (audit, plain_late, chatty_dead)])


async def test_subscriptions_keep_their_own_time_and_events_go_when_nothing_needs_them(
    url: str,
) -> None:
    app = make_app(url)
    async with app:
        store, clock = app.store, app.clock
        assert isinstance(clock, FakeClock)
        quick = SubscriptionSpec(
            name="quick",
            topic="orders",
            target=dict(HOOK),
            start="earliest",
            policy=build_policy(keep_acked="30m"),
        )
        slow = SubscriptionSpec(name="slow", topic="orders", target=dict(HOOK), start="earliest")
        await store.put_subscription(quick, T0)
        await store.put_subscription(slow, T0)
        events = [
            NewEvent(id=f"e{i}", type="t", source="s", time=T0, data_json="{}") for i in range(1, 4)
        ]
        await store.append("orders", events, T0)
        for lease in await store.acquire_subscriptions("d1", T0, 30.0, limit=10):
            news = [NewDelivery(offset=o, event_id=f"e{o}", key=None) for o in (1, 2, 3)]
            assert await store.advance(lease, 3, news, T0)
            taken = await store.take_deliveries(lease, T0, fresh=2, retry=0)
            results = [
                DeliveryResult(
                    delivery_id=d.id,
                    outcome=DeliveryOutcome.ACKED,
                    started_at=T0,
                    finished_at=T0,
                )
                for d in taken
            ]
            await store.finish_deliveries(lease, results, T0)

        clock.advance(2 * HOUR)
        report = await Retention.for_app(app).pass_once()
        assert report.deliveries == 2  # quick's two acked ones; slow keeps 7 days
        assert await store.count_deliveries("quick") == {DeliveryState.PENDING: 1}
        assert await store.count_deliveries("slow") == {
            DeliveryState.ACKED: 2,
            DeliveryState.PENDING: 1,
        }
        # Events older than the store's hour go, but not the one pending deliveries need.
        assert report.events == 2
        assert [e.offset for e in await store.read_events("orders", 0, 10)] == [3]


async def test_one_holder_at_a_time_a_pass_per_period_and_the_lease_released(url: str) -> None:
    app = make_app(url)
    async with app:
        store, clock = app.store, app.clock
        assert isinstance(clock, FakeClock)
        await ended(store, "chatty", T0)
        passes: asyncio.Queue[tuple[str, PurgeReport]] = asyncio.Queue()

        def loop(holder: str) -> Retention:
            rules = rules_for(app.settings, app.tasks.values())
            return Retention(
                store,
                rules=rules,
                clock=clock,
                holder=holder,
                period=HOUR,
                on_pass=lambda report: passes.put_nowait((holder, report)),
            )

        stop = asyncio.Event()
        first = asyncio.create_task(loop("a").run(stop))
        holder, report = await asyncio.wait_for(passes.get(), 10)
        assert holder == "a"
        assert report.runs == 0
        second = asyncio.create_task(loop("b").run(stop))
        await ended(store, "chatty", T0)
        clock.advance(2 * HOUR)
        holder, report = await asyncio.wait_for(passes.get(), 10)
        assert (holder, report.runs) == ("a", 2)
        clock.advance(HOUR)
        holder, _ = await asyncio.wait_for(passes.get(), 10)
        assert holder == "a"
        assert passes.empty()
        assert await store.lease_holder(LEASE, clock.now()) == "a"
        stop.set()
        await asyncio.wait_for(asyncio.gather(first, second), 10)
        assert await store.lease_holder(LEASE, clock.now()) is None
