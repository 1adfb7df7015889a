"""A subscription's ``max_in_flight`` holds in the store however slow the store is.

What the store counts in flight is what a dispatcher that dies now would push again. A pusher
used to count only the pushes going on, not those that had ended but whose results were not
recorded yet, so when results piled up while the match step waited for a slow store, it took
another ``max_in_flight`` deliveries: up to twice the limit in flight (64 of 32 in
tests/cluster/test_dispatcher_kill.py on a busy machine). Here the store's event reads are held
(a slow machine, made certain) while pushes end, and the store's own in-flight count is sampled
after every take.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contract.pg import pg_store_url
from cronbus import App
from cronbus.events import Event, make_event
from cronbus.events.dispatcher import Dispatcher
from cronbus.events.states import DeliveryState
from integration.conftest import until

LIMIT = 4
EVENTS = 12


@pytest.fixture(params=["sqlite", "postgres"])
async def bus(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """An app open on a fresh store of each kind."""
    if request.param == "postgres":
        url = await pg_store_url(request)
    else:
        url = f"sqlite:///{tmp_path / 'bus.db'}"
    app = App(url)
    async with app:
        yield app


class SlowReads:
    """Holds the store's event reads while ``hold`` is set, and samples the store's in-flight
    count of one subscription after every take (the real store, with a pause inserted)."""

    def __init__(self, app: App, subscription: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store: Any = app.store
        self.subscription = subscription
        self.hold = False
        self.held = asyncio.Event()
        self.go_on = asyncio.Event()
        self.samples: list[int] = []
        read, take = self.store.read_events, self.store.take_deliveries

        async def read_events(*args: Any) -> Any:
            if self.hold:
                self.held.set()
                await self.go_on.wait()
            return await read(*args)

        async def take_deliveries(*args: Any) -> Any:
            taken = await take(*args)
            counts = await self.store.count_deliveries(self.subscription)
            self.samples.append(counts.get(DeliveryState.IN_FLIGHT, 0))
            return taken

        monkeypatch.setattr(self.store, "read_events", read_events)
        monkeypatch.setattr(self.store, "take_deliveries", take_deliveries)


async def test_ended_pushes_not_yet_recorded_count_against_max_in_flight(
    bus: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)
    started: list[int] = []

    @bus.subscribe(topic="t", name="held", start="earliest", max_in_flight=LIMIT, timeout=60)
    async def held(event: Event) -> None:
        started.append(event.data["n"])
        await gates[event.data["n"]].wait()

    slow = SlowReads(bus, "held", monkeypatch)
    await bus.publish_many_async("t", [make_event("e", {"n": i}) for i in range(EVENTS)])
    dispatcher = Dispatcher(bus, lease_seconds=30.0, poll_seconds=0.5)
    stopping = asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stopping))
    try:
        await until(lambda: _now(len(started) == LIMIT), timeout=20)
        # The store turns slow: the pusher's next match step waits while pushes end.
        slow.hold = True
        await asyncio.wait_for(slow.held.wait(), 20)
        first = sorted(started)[: LIMIT - 1]
        for n in first:
            gates[n].set()
        pusher = dispatcher.pushers["held"]
        await until(lambda: _now(len(pusher.ended) == LIMIT - 1), timeout=20)
        slow.hold = False
        slow.go_on.set()
        # The pusher takes what it may, records, and takes again: never past the limit.
        await until(lambda: _now(len(started) >= LIMIT + 2), timeout=20)
        for n in range(EVENTS):
            gates[n].set()

        async def all_acked() -> bool:
            counts = await bus.subscriptions.counts("held")
            return counts.get(DeliveryState.ACKED, 0) == EVENTS

        await until(all_acked, timeout=30)
    finally:
        stopping.set()
        await asyncio.wait_for(running, 30)
    assert slow.samples, "no take was sampled"
    assert max(slow.samples) <= LIMIT, slow.samples
    assert sorted(started) == list(range(EVENTS))  # each pushed once


async def _now(value: bool) -> bool:
    return value
