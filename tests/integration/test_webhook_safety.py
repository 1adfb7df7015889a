"""Webhook safety against real loopback servers: redirects are not followed, and the network
policy holds at creation and at delivery, after DNS resolution.

Only loopback addresses are ever connected to: denied names resolve (through a resolver the
test injects, or the system's ``localhost``) to 127.0.0.1 with loopback denied.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cronbus import App
from cronbus.errors import InvalidArgumentError
from cronbus.events import make_event
from cronbus.events.dispatcher import Dispatcher
from cronbus.events.netpolicy import ALLOW_ENV, DENY_ENV, NetPolicy
from cronbus.events.resolvers import StaticResolver
from cronbus.events.states import DeliveryState
from integration.conftest import until
from integration.http_targets import Targets, status

D = DeliveryState
NO_LOOPBACK = {DENY_ENV: "127.0.0.0/8,::1/128"}


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


async def one_attempt(app: App, name: str) -> Any:
    """Publish one event to ``name``'s topic, wait for its dead letter, return it."""
    await app.publish_many_async("t", [make_event("e", {"n": 1})])

    async def dead() -> bool:
        return (await app.subscriptions.counts(name)).get(D.DEAD, 0) == 1

    await until(dead, timeout=20)
    (letter,) = await app.subscriptions.deliveries(name, states=["dead"])
    return letter


async def test_redirects_are_failed_attempts_naming_the_location(
    bus: App, targets: Targets
) -> None:
    elsewhere = targets.url("/elsewhere")
    await bus.subscriptions.add(
        "moved",
        topic="t",
        webhook=targets.on("/moved", status(307, {"Location": elsewhere + "?token=abc"})),
        max_attempts=1,
    )
    await bus.subscriptions.add(
        "perm",
        topic="t",
        webhook=targets.on("/perm", status(301, {"Location": elsewhere})),
        max_attempts=1,
    )
    async with Running(bus):
        letter = await one_attempt(bus, "moved")
        await until(lambda: _now(len(targets.received["/perm"]) == 1), timeout=20)
        (perm,) = await _dead_when_ready(bus, "perm")
    assert letter.last_status == 307
    assert letter.last_error == f"HTTP 307: redirect to {elsewhere}?token=*** not followed"
    assert perm.last_status == 301  # not a GET answered 501
    assert perm.last_error == f"HTTP 301: redirect to {elsewhere} not followed"
    assert targets.received["/elsewhere"] == []  # the signed body went nowhere else
    assert [r.event["id"] for r in targets.received["/moved"]] == [letter.event_id]


async def _dead_when_ready(app: App, name: str) -> list[Any]:
    async def dead() -> bool:
        return (await app.subscriptions.counts(name)).get(D.DEAD, 0) == 1

    await until(dead, timeout=20)
    return await app.subscriptions.deliveries(name, states=["dead"])


async def test_a_name_resolving_to_a_denied_address_is_not_reached(
    bus: App, targets: Targets
) -> None:
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"]})
    url = f"http://hooks.test:{targets.port}/named"
    await bus.subscriptions.add("named", topic="t", webhook=url, max_attempts=1)
    policy = NetPolicy.from_env(NO_LOOPBACK)
    async with Running(bus, policy=policy, resolver=resolver):
        letter = await one_attempt(bus, "named")
    assert "hooks.test resolves only to denied addresses (127.0.0.1)" in letter.last_error
    assert targets.received["/named"] == []


async def test_the_same_name_is_reached_when_its_address_is_allowed(
    bus: App, targets: Targets
) -> None:
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"]})
    await bus.subscriptions.add(
        "named", topic="t", webhook=f"http://hooks.test:{targets.port}/named"
    )
    async with Running(bus, policy=NetPolicy.from_env({}), resolver=resolver):
        await bus.publish_many_async("t", [make_event("e", {"n": 1})])
        await until(lambda: _now(len(targets.received["/named"]) == 1), timeout=20)
    assert targets.received["/named"][0].headers["host"] == f"hooks.test:{targets.port}"


async def test_localhost_with_loopback_denied_goes_through_the_system_resolver(
    bus: App, targets: Targets
) -> None:
    url = f"http://localhost:{targets.port}/local"
    await bus.subscriptions.add("local", topic="t", webhook=url, max_attempts=1)
    async with Running(bus, policy=NetPolicy.from_env(NO_LOOPBACK)):
        letter = await one_attempt(bus, "local")
    assert "localhost resolves only to denied addresses" in letter.last_error
    assert targets.received["/local"] == []


async def test_a_literal_address_denied_at_delivery_is_not_reached(
    bus: App, targets: Targets
) -> None:
    # Created while loopback was allowed; the dispatcher's policy says no.
    await bus.subscriptions.add(
        "literal", topic="t", webhook=targets.url("/literal"), max_attempts=1
    )
    async with Running(bus, policy=NetPolicy.from_env(NO_LOOPBACK)):
        letter = await one_attempt(bus, "literal")
    assert "127.0.0.1 is in a denied network" in letter.last_error
    assert targets.received["/literal"] == []


async def test_creation_refuses_denied_and_malformed_urls(
    bus: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:8080/",
        "http://[::]/",
        "http://[fe80::1%25eth0]/",
        "http://127.0.0.1:1/a b",
    ):
        with pytest.raises(InvalidArgumentError):
            await bus.subscriptions.add("x", topic="t", webhook=url)
    monkeypatch.setenv(DENY_ENV, "127.0.0.0/8")
    with pytest.raises(InvalidArgumentError, match="denied network"):
        await bus.subscriptions.add("x", topic="t", webhook="http://127.0.0.1:1/")
    monkeypatch.setenv(ALLOW_ENV, "127.0.0.1/32")
    await bus.subscriptions.add("x", topic="t", webhook="http://127.0.0.1:1/")
    assert [s.name for s in await bus.subscriptions.list()] == ["x"]


async def _now(value: bool) -> bool:
    return value
