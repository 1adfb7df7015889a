"""The dispatcher says so when a push fails or a delivery dies, without flooding the log, and
without showing a webhook's URL.

Real loopback servers (500, 429, slow, refused) and raising handlers; the records are read with
``caplog``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cronbus import App
from cronbus.events import Event, make_event
from cronbus.events.dispatcher import Dispatcher
from cronbus.events.faultlog import DEAD, FAILED, SUPPRESSED, FaultLog
from cronbus.events.states import DeliveryState
from integration.conftest import until
from integration.http_targets import Targets, flaky, slow, status

D = DeliveryState
FAST = {"backoff": 0.05, "max_backoff": 0.1, "circuit_failures": 1000}
LOGGER = "cronbus.dispatcher"


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[App]:
    """An app open on a fresh SQLite file."""
    app = App(f"sqlite:///{tmp_path / 'bus.db'}")
    async with app:
        yield app


class Running:
    """A dispatcher running in the test's loop."""

    def __init__(self, app: App, **options: Any) -> None:
        self.dispatcher = Dispatcher(app, lease_seconds=3.0, poll_seconds=0.5, **options)
        self.stopping = asyncio.Event()
        self.task = asyncio.create_task(self.dispatcher.run(self.stopping))

    async def __aenter__(self) -> Running:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stopping.set()
        await asyncio.wait_for(self.task, 30)


def records(caplog: pytest.LogCaptureFixture, action: str, sub: str) -> list[logging.LogRecord]:
    """The dispatcher's records of ``action`` about subscription ``sub``."""
    return [
        r
        for r in caplog.records
        if getattr(r, "action", None) == action and getattr(r, "subscription", None) == sub
    ]


async def dead(app: App, name: str, count: int) -> None:
    async def check() -> bool:
        return (await app.subscriptions.counts(name)).get(D.DEAD, 0) == count

    await until(check, timeout=20)


async def test_every_kind_of_failure_is_a_warning_naming_subscription_host_and_cause(
    bus: App, targets: Targets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    port = targets.port
    await bus.subscriptions.add(
        "s500", topic="t", webhook=targets.on("/500", status(500)), max_attempts=2, **FAST
    )
    await bus.subscriptions.add(
        "s429",
        topic="t",
        webhook=targets.on("/429", flaky(1, 429, {"Retry-After": "0"})),
        **FAST,
    )
    await bus.subscriptions.add(
        "slow",
        topic="t",
        webhook=targets.on("/slow", slow(5)),
        timeout=0.2,
        max_attempts=1,
    )
    # A port nobody listens on: the connection is refused.
    await bus.subscriptions.add(
        "refused", topic="t", webhook="http://127.0.0.1:9/x", max_attempts=1
    )

    @bus.subscribe(topic="t", name="raising", max_attempts=1)
    def raising(event: Event) -> None:
        raise ValueError("the handler broke")

    async with Running(bus) as running:
        # The handler's subscription is created when the dispatcher starts; wait for it.
        await until(lambda: _now("raising" in running.dispatcher.pushers), timeout=10)
        await bus.publish_many_async("t", [make_event("e", {"n": 1})])
        for name in ("s500", "slow", "refused", "raising"):
            await dead(bus, name, 1)

        async def acked_429() -> bool:
            return (await bus.subscriptions.counts("s429")).get(D.ACKED, 0) == 1

        await until(acked_429, timeout=20)

    (first_500, second_500) = records(caplog, FAILED, "s500")
    assert first_500.levelno == logging.WARNING
    assert (first_500.target, first_500.status) == (f"127.0.0.1:{port}", 500)  # type: ignore[attr-defined]
    assert "attempt 1" in first_500.getMessage()
    assert "retry in" in first_500.getMessage()
    assert "attempt 2" in second_500.getMessage()
    assert "no attempts left" in second_500.getMessage()
    (dead_500,) = records(caplog, DEAD, "s500")
    assert "dead letter after 2 attempt(s): HTTP 500" in dead_500.getMessage()
    (busy,) = records(caplog, FAILED, "s429")
    assert busy.status == 429  # type: ignore[attr-defined]
    assert len(records(caplog, FAILED, "slow")) == 1
    (timed_out,) = records(caplog, DEAD, "slow")
    assert "timed out after 0.2s" in timed_out.getMessage()
    (refused,) = records(caplog, DEAD, "refused")
    assert "127.0.0.1:9" in refused.getMessage()
    assert "Cannot connect" in refused.error  # type: ignore[attr-defined]
    (broke,) = records(caplog, DEAD, "raising")
    assert broke.target == "handler raising"  # type: ignore[attr-defined]
    assert "ValueError: the handler broke" in broke.getMessage()


async def test_a_dead_target_cannot_flood_the_log(
    bus: App, targets: Targets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    await bus.subscriptions.add(
        "flood", topic="t", webhook=targets.on("/down", status(503)), max_attempts=1, **FAST
    )
    running = Running(bus)
    running.dispatcher.faults = FaultLog(logging.getLogger(LOGGER), limit=3, window=1.0)
    started = time.monotonic()
    async with running:
        await bus.publish_many_async("t", [make_event("e", {"n": i}) for i in range(20)])
        await dead(bus, "flood", 20)
        windows = math.ceil(time.monotonic() - started) + 1
        # Windows close within a second; the next lease round writes what they suppressed.
        await until(lambda: _now(_told(caplog) == 20), timeout=10)
    written = records(caplog, DEAD, "flood")
    assert len(written) <= 3 * windows  # 3 per window of a second
    assert _suppressed(caplog, DEAD) > 0
    assert _told(caplog) == 20  # every death written or counted, once
    failed = records(caplog, FAILED, "flood")
    assert len(failed) <= 3 * windows
    assert len(failed) + _suppressed(caplog, FAILED) <= 20


def _told(caplog: pytest.LogCaptureFixture) -> int:
    return len(records(caplog, DEAD, "flood")) + _suppressed(caplog, DEAD)


def _suppressed(caplog: pytest.LogCaptureFixture, kind: str) -> int:
    lines = records(caplog, SUPPRESSED, "flood")
    assert all("suppressed" in r.getMessage() for r in lines)
    return sum(r.suppressed for r in lines if r.kind == kind)  # type: ignore[attr-defined]


async def test_logs_name_the_host_never_the_url_or_its_secrets(
    bus: App, targets: Targets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://user:pa55word@127.0.0.1:{targets.port}/fail?token=t0ken"
    targets.on("/fail", status(500))
    await bus.subscriptions.add(
        "secret", topic="t", webhook=url, headers={"Authorization": "Bearer b3arer"}, max_attempts=1
    )
    async with Running(bus):
        await bus.publish_many_async("t", [make_event("e", {"n": 1})])
        await dead(bus, "secret", 1)
    assert records(caplog, DEAD, "secret")
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for secret in ("pa55word", "t0ken", "b3arer", "/fail"):
        assert secret not in text


async def test_a_410_disables_the_subscription_without_a_lost_lease_warning(
    bus: App, targets: Targets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    await bus.subscriptions.add("gone", topic="t", webhook=targets.on("/gone", status(410)))
    async with Running(bus) as running:
        await until(lambda: _now("gone" in running.dispatcher.pushers), timeout=10)
        await bus.publish_many_async("t", [make_event("e", {"n": i}) for i in range(3)])

        async def let_go() -> bool:
            return "gone" not in running.dispatcher.pushers

        await until(let_go, timeout=20)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "lost" in m and "lease" in m], messages
    assert any("disabled: its target" in m and "410 Gone" in m for m in messages)
    assert any("subscription gone is paused (the target answered 410 Gone)" in m for m in messages)


async def _now(value: bool) -> bool:
    return value
