"""A dispatcher process killed (SIGKILL) while it pushes 10,000 events to a webhook: nothing is
lost, and only what it had in flight is pushed again. On SQLite and on PostgreSQL.

The webhook is a loopback server in the test process that records the ``webhook-id`` (the event
id) of every request. A first dispatcher (``cronbus dispatcher`` with a 2 s lease) pushes until
about a third of the events have arrived and is killed; the store is then frozen (nobody holds
the lease), and the test reads what it held: the deliveries ``in_flight``, and which events the
server received without the store having recorded them as acked. A second dispatcher takes the
lease over when it expires and pushes the rest.

What must hold (invariant 4 and the pusher's lease):

* every event arrives at least once, and the store ends with exactly one acked delivery per
  event (no duplicate delivery was recorded, none is left behind);
* an event is pushed twice only if its delivery was in flight at the kill: the duplicates are
  a subset of those deliveries, so they are at most as many as were in flight (at most the
  subscription's ``max_in_flight``), and none is pushed three times;
* every event the server received but the store had not acked is pushed again (at least once).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from apps import dispatch_app
from contract.pg import pg_store_url, with_options
from cronbus import App
from cronbus.events import make_event
from cronbus.events.states import DeliveryState
from integration.http_targets import Targets

from .conftest import TESTS, until, wait_exit

pytestmark = pytest.mark.slow

EVENTS = 10_000
BATCH = 500
IN_FLIGHT = 32
LEASE = "2"
KILL_AT = EVENTS // 3
TOPIC = "orders"
SUB = "orders-hook"
PATH = "/hook"
FINISH_SECONDS = 60.0
SETTLE_SECONDS = 0.3
"""The server's count must hold still this long after the kill before it is read: requests
the dead process had already written may still be in the server's socket buffer."""


class Dispatchers:
    """``cronbus dispatcher`` processes on one store, with a short lease; none outlives the
    test."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "CRONBUS_DISPATCHER_LEASE_SECONDS": LEASE,
            "CRONBUS_POLL_SECONDS": "1",
        }
        command = [sys.executable, "-m", "cronbus", "dispatcher", "--app", "apps.dispatch_app:app"]
        command += ["--store", self.url, "--log-level", "INFO"]
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def outputs(self) -> str:
        """Every process's log tail, for failure messages."""
        return "\n".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}"
            for log in sorted(self.logs.glob("*.log"))
        )

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each kind (PostgreSQL: a schema of its own, dropped after)."""
    if request.param == "postgres":
        return with_options(await pg_store_url(request), pool_max="4")
    return f"sqlite:///{tmp_path / 'bus.db'}"


@pytest.fixture
async def bus(store_url: str) -> AsyncIterator[App]:
    """The dispatch app, open on the test's store (for publishing and reading)."""
    app = dispatch_app.app
    app.use_store(store_url)
    async with app:
        yield app


@pytest.fixture
async def server() -> AsyncIterator[Targets]:
    """The loopback webhook receiver."""
    targets = Targets()
    await targets.start()
    yield targets
    await targets.stop()


@pytest.fixture
def dispatchers(store_url: str, tmp_path: Path) -> Iterator[Dispatchers]:
    """Dispatcher processes on the test's store, all killed at the end."""
    procs = Dispatchers(store_url, tmp_path)
    try:
        yield procs
    finally:
        procs.kill_all()


def arrived(server: Targets) -> list[str]:
    """Event ids the server received, in arrival order (duplicates included)."""
    return [r.headers["webhook-id"] for r in server.received[PATH]]


async def publish_all(app: App) -> list[str]:
    """Publish the test's events in batches; their ids."""
    ids = [f"ev-{n:05d}" for n in range(EVENTS)]
    for start in range(0, EVENTS, BATCH):
        chunk = ids[start : start + BATCH]
        await app.publish_many_async(
            TOPIC, [make_event("order.created", {"n": i}, id=i) for i in chunk]
        )
    return ids


async def wait_arrivals(server: Targets, count: int, timeout: float) -> None:
    """Wait (polling closely, so the kill lands near ``count``) for ``count`` requests."""
    deadline = asyncio.get_running_loop().time() + timeout
    while len(server.received[PATH]) < count:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"only {len(server.received[PATH])} requests in {timeout} s")
        await asyncio.sleep(0.002)


async def settle(server: Targets) -> None:
    """Wait until the server's request count holds still for SETTLE_SECONDS."""
    seen = -1
    while len(server.received[PATH]) != seen:
        seen = len(server.received[PATH])
        await asyncio.sleep(SETTLE_SECONDS)


async def test_sigkill_of_a_dispatcher_loses_nothing_and_repeats_only_its_flights(
    bus: App, server: Targets, dispatchers: Dispatchers
) -> None:
    started = time.monotonic()
    await bus.subscriptions.add(
        SUB, topic=TOPIC, webhook=server.url(PATH), start="earliest", max_in_flight=IN_FLIGHT
    )
    ids = await publish_all(bus)
    victim = dispatchers.start("victim")
    try:
        await wait_arrivals(server, KILL_AT, timeout=40)
    except AssertionError:
        raise AssertionError(dispatchers.outputs()) from None
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    killed = time.monotonic()

    # Nobody holds the lease now: the store stays as the dead process left it.
    await settle(server)
    at_kill = Counter(arrived(server))
    counts = await bus.subscriptions.counts(SUB)
    in_flight = {
        d.event_id
        for d in await bus.subscriptions.deliveries(SUB, states=["in_flight"], limit=EVENTS)
    }
    acked = {
        d.event_id for d in await bus.subscriptions.deliveries(SUB, states=["acked"], limit=EVENTS)
    }
    unrecorded = set(at_kill) - acked  # reached the target, not recorded as acked
    assert len(in_flight) == counts.get(DeliveryState.IN_FLIGHT, 0)
    assert 0 < len(in_flight) <= IN_FLIGHT, counts
    assert max(at_kill.values()) == 1, "pushed twice before any failure"
    assert unrecorded <= in_flight, "the target got an event whose delivery was not in flight"

    survivor = dispatchers.start("survivor")
    received_at_kill = sum(at_kill.values())

    async def pushing_again() -> bool:
        return len(server.received[PATH]) > received_at_kill

    await until(pushing_again, timeout=20)
    takeover = time.monotonic() - killed

    async def all_acked() -> bool:
        counts = await bus.subscriptions.counts(SUB)
        return counts.get(DeliveryState.ACKED, 0) == EVENTS

    try:
        await until(all_acked, timeout=FINISH_SECONDS)
    except AssertionError:
        counts = await bus.subscriptions.counts(SUB)
        raise AssertionError(f"{counts}\n{dispatchers.outputs()}") from None
    survivor.send_signal(signal.SIGTERM)
    assert await wait_exit(survivor, 20) == 0, dispatchers.outputs()

    final = await bus.subscriptions.counts(SUB)
    assert final == {DeliveryState.ACKED: EVENTS}  # one delivery per event, none left behind
    received = Counter(arrived(server))
    assert set(received) == set(ids)  # nothing lost
    repeated = {event_id: n - 1 for event_id, n in received.items() if n > 1}
    assert max(received.values()) <= 2, "an event was pushed three times"
    assert set(repeated) <= in_flight, "an event not in flight at the kill was pushed again"
    assert unrecorded <= set(repeated), "an unrecorded push was not repeated"
    duplicates = sum(repeated.values())
    assert duplicates <= len(in_flight) <= IN_FLIGHT
    print(
        f"\n[{bus.store.__class__.__name__}] killed at {received_at_kill} requests received, "
        f"{len(acked)} acked; in flight at the kill {len(in_flight)}, of which received but "
        f"not acked {len(unrecorded)}; duplicates {duplicates}; takeover {takeover:.1f} s; "
        f"total {time.monotonic() - started:.1f} s"
    )
