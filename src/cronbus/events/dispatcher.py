"""The dispatcher: holds subscriptions' pushers by lease and pushes their deliveries.

One :class:`Dispatcher` per process. Every ``lease_seconds / 3`` it renews its leases and takes
free ones (a pusher moves to another process when its holder dies); for each subscription it
holds it runs a :class:`Pusher`, which loops over three steps, each one store transaction:

1. **record** the pushes that ended (acked, to retry, dead), in one batch;
2. **match** the events past the cursor against the filter, and record the deliveries of the
   matching ones together with the cursor move that passes them (invariant 4);
3. **take** due deliveries, fresh ones and, in fewer slots, retries, and push them concurrently.

Isolation (invariant 5): each pusher has its own in-flight limit, a fair share of the shared
pool, so a slow or failing target only ever fills its own slots; retries use at most a quarter of
a pusher's slots, so a dead endpoint's retries never starve first attempts; a maximum execution
time interrupts each push; a target that keeps failing gets its circuit opened and is probed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import socket
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import aiohttp

from ..store.base import Listener
from ..store.events_base import EVENTS_CHANNEL, SUBSCRIPTIONS_CHANNEL, EventStore
from .filters import Filter
from .pacing import Breaker, RateLimit, retry_delay
from .records import (
    Delivery,
    DeliveryOutcome,
    DeliveryResult,
    NewDelivery,
    Subscription,
    SubscriptionLease,
)
from .targets import Handler, PushResult, Target, build_target, to_event

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("cronbus.dispatcher")

RETRY_SHARE = 0.25
"""The share of a pusher's slots that retries may use; the rest is kept for fresh deliveries."""
_STORE_RETRY = 1.0
GONE_EVENT = "the event was removed by the topic's retention before it could be delivered"
TRIM_SECONDS = 60.0
"""How often a dispatcher applies the topics' retention."""


class Dispatcher:
    """Pushes the deliveries of the subscriptions this process holds."""

    def __init__(
        self,
        app: App,
        *,
        pool: int | None = None,
        lease_seconds: float | None = None,
        batch: int = 500,
        max_subscriptions: int = 1000,
        poll_seconds: float | None = None,
    ) -> None:
        self.app = app
        self.pool = pool or app.settings.dispatcher_pool
        self.lease_seconds = lease_seconds or app.settings.dispatcher_lease_seconds
        self.batch = batch
        self.max_subscriptions = max_subscriptions
        self.poll_seconds = poll_seconds or app.settings.poll_seconds
        self.id = f"dispatcher-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.slots = asyncio.Semaphore(self.pool)
        self.pushers: dict[str, Pusher] = {}
        self.handlers: Mapping[str, Handler] = app.handlers
        self._client: aiohttp.ClientSession | None = None

    @property
    def store(self) -> EventStore:
        """The app's store, as an event store."""
        return self.app.store

    @property
    def client(self) -> aiohttp.ClientSession:
        """The HTTP session every webhook target shares (one pool of keep-alive connections)."""
        if self._client is None:
            raise RuntimeError("the dispatcher is not running")
        return self._client

    def share(self) -> int:
        """The in-flight limit of each pusher: a fair share of the pool."""
        return max(1, math.ceil(self.pool / max(1, len(self.pushers))))

    async def run(self, stopping: asyncio.Event) -> None:
        """Hold and push subscriptions until ``stopping`` is set, then let go of them."""
        # Timeouts are the dispatcher's (asyncio.timeout per push); cookies are not shared
        # between targets.
        self._client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.pool, limit_per_host=0),
            timeout=aiohttp.ClientTimeout(total=None),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        listener = await self.app.store.listen([EVENTS_CHANNEL])
        changes = await self.app.store.listen([SUBSCRIPTIONS_CHANNEL])
        log.info("dispatcher %s started", self.id, extra={"action": "dispatcher.start"})
        try:
            await self.app.subscriptions.sync()
            loop = asyncio.get_running_loop()
            balance_at = trim_at = loop.time()
            while not stopping.is_set():
                if loop.time() >= balance_at:
                    balance_at = loop.time() + self.lease_seconds / 3
                    try:
                        await self._balance()
                        if loop.time() >= trim_at:
                            trim_at = loop.time() + TRIM_SECONDS
                            await self._trim()
                    except Exception:
                        log.exception("renewing subscription leases failed; trying again")
                        balance_at = loop.time() + _STORE_RETRY
                # New events wake the pushers only; leases are renewed on their own clock,
                # or at once when subscriptions change.
                woken = await _wait_any((listener, changes), stopping, balance_at - loop.time())
                if listener in woken:
                    for pusher in self.pushers.values():
                        pusher.wake()
                if changes in woken:
                    balance_at = loop.time()
        finally:
            await self._stop_all()
            await listener.close()
            await changes.close()
            await self._client.close()
            log.info("dispatcher %s stopped", self.id, extra={"action": "dispatcher.stop"})

    async def _balance(self) -> None:
        """Renew leases, take free ones, and start or stop pushers to match."""
        now = self.app.clock.now()
        leases = await self.store.acquire_subscriptions(
            self.id, now, self.lease_seconds, self.max_subscriptions
        )
        held = {lease.subscription: lease for lease in leases}
        for name in [n for n in self.pushers if n not in held]:
            log.warning("lost the lease of subscription %s", name)
            await self.pushers.pop(name).stop(flush=False)
        subs = {s.name: s for s in await self.store.list_subscriptions()}
        for name, lease in held.items():
            sub = subs.get(name)
            pusher = self.pushers.get(name)
            # A new epoch (the lease was let go by a pause or a replay, then taken again) means
            # a new pusher, from the stored cursor.
            if (
                pusher is not None
                and sub is not None
                and pusher.sub.spec == sub.spec
                and pusher.running
                and pusher.lease.epoch == lease.epoch
            ):
                pusher.lease = lease
                continue
            if pusher is not None:
                await self.pushers.pop(name).stop(flush=True)
            if sub is None:
                continue
            target = build_target(
                sub.spec, app=self.app, client=self.client, handlers=self.handlers
            )
            if target is None:
                log.warning(
                    "subscription %s: no handler %r in this app; letting it go",
                    name,
                    sub.spec.target.get("handler"),
                )
                await self.store.release_subscriptions(self.id, [name])
                continue
            pusher = Pusher(self, lease, sub, target)
            self.pushers[name] = pusher
            pusher.start()

    async def _trim(self) -> None:
        """Apply topics' retention (every dispatcher does; a second pass finds nothing)."""
        removed = await self.store.trim(self.app.clock.now())
        if removed:
            log.info("retention removed %d events", removed, extra={"action": "events.trim"})

    async def _stop_all(self) -> None:
        names = list(self.pushers)
        await asyncio.gather(*(p.stop(flush=True) for p in self.pushers.values()))
        self.pushers.clear()
        if names:
            with contextlib.suppress(Exception):
                await self.store.release_subscriptions(self.id, names)


class Pusher:
    """Matches and pushes the events of one subscription while its lease is held."""

    def __init__(
        self, dispatcher: Dispatcher, lease: SubscriptionLease, sub: Subscription, target: Target
    ) -> None:
        self.dispatcher = dispatcher
        self.lease = lease
        self.sub = sub
        self.policy = sub.spec.policy
        self.filter = Filter.from_json(sub.spec.filter)
        self.target = target
        self.cursor = sub.cursor
        self.breaker = Breaker(self.policy.circuit_failures, self.policy.circuit_probe)
        self.rate = RateLimit(self.policy.rate_limit)
        self.flights: dict[int, asyncio.Task[None]] = {}
        self.retries_in_flight = 0
        self.ended: list[DeliveryResult] = []
        self.gone = False
        self._backlog = True
        self._retries_waiting = True
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def name(self) -> str:
        """The subscription's name."""
        return self.sub.name

    def start(self) -> None:
        """Start the pusher's loop."""
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"push:{self.name}")

    def wake(self) -> None:
        """New events or due deliveries (a requeue) may be there."""
        self._backlog = True
        self._retries_waiting = True
        self._wake.set()

    @property
    def running(self) -> bool:
        """False once the loop ended (lease lost, subscription disabled)."""
        return self._task is not None and not self._task.done()

    async def stop(self, *, flush: bool) -> None:
        """Stop pushing; with ``flush``, wait briefly for pushes in flight and record them."""
        self._stopping = True
        self._wake.set()
        if flush and self.flights:
            await asyncio.wait(list(self.flights.values()), timeout=self.policy.timeout)
        for flight in self.flights.values():
            flight.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if flush and self.ended:
            with contextlib.suppress(Exception):
                await self._record()

    # -- the loop -----------------------------------------------------------------------------
    async def _loop(self) -> None:
        clock = self.dispatcher.app.clock
        while not self._stopping:
            self._wake.clear()
            try:
                if not await self._turn():
                    log.warning("subscription %s: lease lost; stopping its pusher", self.name)
                    return
            except Exception:
                log.exception("subscription %s: pushing failed; trying again", self.name)
                await _sleep_or(self._wake, _STORE_RETRY)
                continue
            if self._wake.is_set():
                continue
            await _sleep_or(self._wake, await self._idle_timeout(clock.now()))

    async def _turn(self) -> bool:
        """One round of record, match and take; False once the lease is lost."""
        if self.ended and not await self._record():
            return False
        if self.gone:
            return True
        moved = await self._match()
        if moved is None:
            return False
        if moved:
            self._wake.set()  # a full batch: there may be more past it
        await self._take()
        return True

    async def _record(self) -> bool:
        ended, self.ended = self.ended, []
        store, now = self.dispatcher.store, self.dispatcher.app.clock.now()
        try:
            done = await store.finish_deliveries(self.lease, ended, now)
        except BaseException:
            self.ended[:0] = ended
            raise
        if self.gone:
            await store.set_subscription_paused(
                self.name, True, "the target answered 410 Gone", now
            )
            log.warning("subscription %s disabled: its target answered 410 Gone", self.name)
            self._stopping = True
            return True
        # Results are refused only when the lease moved to another dispatcher.
        return any(done)

    async def _match(self) -> bool | None:
        """Record deliveries for the matching events past the cursor; True if a full batch."""
        store, now = self.dispatcher.store, self.dispatcher.app.clock.now()
        batch = self.dispatcher.batch
        events = await store.read_events(self.sub.topic, self.cursor, batch)
        if not events:
            return False
        matching = [
            NewDelivery(offset=e.offset, event_id=e.id, key=e.order_key)
            for e in events
            if self.filter.matches(to_event(e))
        ]
        last = events[-1].offset
        if not await store.advance(self.lease, last, matching, now):
            return None
        self.cursor = last
        if matching:
            self._backlog = True
        return len(events) == batch

    async def _take(self) -> None:
        """Take due deliveries into free slots and start pushing them."""
        if not self._backlog:
            return
        clock = self.dispatcher.app.clock
        now = clock.now()
        limit = min(self.policy.max_in_flight, self.dispatcher.share())
        free = limit - len(self.flights)
        allowed = self.breaker.allowed(now, len(self.flights))
        if allowed >= 0:
            free = min(free, allowed)
        free = self.rate.grant(now, free) if free > 0 else 0
        if free <= 0:
            return
        retry_cap = max(1, int(limit * RETRY_SHARE))
        # Retries get at most their share of the slots; when none are waiting, none are kept.
        retry = min(free, retry_cap - self.retries_in_flight) if self._retries_waiting else 0
        retry = max(0, retry)
        fresh = free - retry
        store = self.dispatcher.store
        taken = await store.take_deliveries(self.lease, now, fresh, retry)
        got_retry = sum(1 for d in taken if d.attempts > 0)  # retries have spent one
        got_fresh = len(taken) - got_retry
        if got_retry < retry:
            self._retries_waiting = False
            if got_fresh == fresh:
                # Slots kept for retries that were not due go to fresh deliveries.
                more = await store.take_deliveries(self.lease, now, retry - got_retry, 0)
                taken += more
                fresh += retry - got_retry
                got_fresh += len(more)
        # Something may be left when a lane filled every slot it was offered.
        self._backlog = (fresh > 0 and got_fresh >= fresh) or (retry > 0 and got_retry >= retry)
        self.rate.refund(free - len(taken))  # tokens that found nothing to push
        for delivery in taken:
            self.breaker.started(now)
            self._launch(delivery)

    def _launch(self, delivery: Delivery) -> None:
        is_retry = delivery.attempts > 0
        if is_retry:
            self.retries_in_flight += 1
        flight = asyncio.get_running_loop().create_task(self._push(delivery, is_retry))
        self.flights[delivery.id] = flight

    async def _push(self, delivery: Delivery, is_retry: bool) -> None:
        clock = self.dispatcher.app.clock
        try:
            async with self.dispatcher.slots:
                started = clock.now()
                try:
                    if delivery.event is None:
                        result = PushResult(ok=False, error=GONE_EVENT)
                    else:
                        async with asyncio.timeout(self.policy.timeout):
                            result = await self.target.push(delivery, delivery.event)
                    timed_out = False
                except TimeoutError:
                    result = PushResult(ok=False, error=f"timed out after {self.policy.timeout}s")
                    timed_out = True
                except Exception as exc:  # a target bug must not kill the pusher
                    result = PushResult(ok=False, error=f"{type(exc).__name__}: {exc}")
                    timed_out = False
            self.ended.append(self._result(delivery, result, started, clock.now(), timed_out))
        finally:
            self.flights.pop(delivery.id, None)
            if is_retry:
                self.retries_in_flight -= 1
            self._wake.set()

    def _result(
        self,
        delivery: Delivery,
        result: PushResult,
        started: float,
        finished: float,
        timed_out: bool,
    ) -> DeliveryResult:
        """Turn a push into a recorded result, deciding about the retry."""
        recorded = DeliveryResult(
            delivery_id=delivery.id,
            outcome=DeliveryOutcome.ACKED,
            started_at=started,
            finished_at=finished,
            status=result.status,
            response=result.response,
            error=result.error,
        )
        if result.ok:
            self.breaker.succeeded()
            return recorded
        outcome = DeliveryOutcome.TIMED_OUT if timed_out else DeliveryOutcome.FAILED
        if result.gone:
            # Not the event's fault: keep it, due at once, for when the subscription resumes.
            self.gone = True
            self._retries_waiting = True
            return replace(recorded, outcome=outcome, retry_at=finished, spend_attempt=False)
        if delivery.event is None:
            # Nothing to push, ever: a dead letter at once, with the reason.
            return replace(recorded, outcome=outcome, retry_at=None)
        self.breaker.failed(finished)
        attempt = delivery.attempts + 1
        if attempt >= self.policy.max_attempts:
            return replace(recorded, outcome=outcome, retry_at=None)
        delay = retry_delay(self.policy, attempt, random.random())
        if result.retry_after is not None:
            delay = max(delay, result.retry_after)
        self._retries_waiting = True
        return replace(recorded, outcome=outcome, retry_at=finished + delay)

    async def _idle_timeout(self, now: float) -> float:
        """How long to sleep: until a retry is due, a probe may go, or a rate token comes."""
        timeout = self.dispatcher.poll_seconds
        probe = self.breaker.next_probe()
        if probe is not None:
            timeout = min(timeout, max(0.0, probe - now))
        if self.rate.rate is not None and self._backlog:
            timeout = min(timeout, self.rate.delay(now))
        if not self.flights and not self._backlog:
            due = await self.dispatcher.store.next_delivery_due(self.name)
            if due is not None:
                timeout = min(timeout, max(0.0, due - now))
                # What comes due may be a retry: offer the retry lane again then.
                self._retries_waiting = True
                if due <= now:
                    self._backlog = True
        elif self._backlog and probe is None and self.rate.rate is None:
            timeout = min(timeout, 0.05)
        return timeout


async def _sleep_or(event: asyncio.Event, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()


async def _wait_any(
    listeners: tuple[Listener, ...], stopping: asyncio.Event, timeout: float
) -> set[Listener]:
    """Wait for a wake-up on any of ``listeners`` or for ``stopping``; return those woken."""
    waits = {asyncio.ensure_future(lis.wait(max(0.0, timeout))): lis for lis in listeners}
    stop = asyncio.ensure_future(stopping.wait())
    done, pending = await asyncio.wait({*waits, stop}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return {waits[t] for t in done if t in waits and t.result()}
