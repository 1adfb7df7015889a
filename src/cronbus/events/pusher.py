"""A subscription's pusher: matches its events and pushes its deliveries while its lease holds.

A :class:`Pusher` loops over three steps, each one store transaction:

1. **record** the pushes that ended (acked, to retry, dead), in one batch;
2. **match** the events past the cursor against the filter, and record the deliveries of the
   matching ones together with the cursor move that passes them (invariant 4);
3. **take** due deliveries, fresh ones and, in fewer slots, retries, and push them concurrently.

In flight, for the limit, is what the store counts in flight: the pushes going on *and* those
that ended but whose result is not recorded yet. Counting only the pushes going on let a slow
store (results waiting while the match step runs) take a second ``max_in_flight`` of deliveries
before the first was recorded: twice the limit in flight, and twice as many pushes repeated when
the process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
from dataclasses import replace
from typing import TYPE_CHECKING

from ..observability import tracing
from ..observability.logs import SUBSCRIPTION
from .filters import Filter
from .pacing import Breaker, RateLimit, retry_delay
from .records import (
    Delivery,
    DeliveryOutcome,
    DeliveryResult,
    EventRecord,
    NewDelivery,
    Subscription,
    SubscriptionLease,
)
from .targets import PushResult, Target, to_event

if TYPE_CHECKING:
    from .dispatcher import Dispatcher

log = logging.getLogger("cronbus.dispatcher")

RETRY_SHARE = 0.25
"""The share of a pusher's slots that retries may use; the rest is kept for fresh deliveries."""
STORE_RETRY = 1.0
"""Seconds before a pusher tries again after the store failed."""
GONE_EVENT = "the event was removed by the topic's retention before it could be delivered"
LOST_AT_STOP = "the pusher stopped before the push ended"


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

    @property
    def in_flight(self) -> int:
        """Deliveries the store counts in flight: pushing, or ended but not recorded yet."""
        return len(self.flights) + len(self.ended)

    def start(self) -> None:
        """Start the pusher's loop."""
        # Its lines (and its pushes', tasks it starts) name the subscription in JSON logs.
        context = contextvars.copy_context()
        context.run(SUBSCRIPTION.set, self.name)
        self._task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"push:{self.name}", context=context
        )

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
        """Stop pushing; with ``flush``, wait briefly for pushes in flight and record them.

        Pushes still going after that are cancelled and recorded as lost (due again at once,
        no attempt spent), so a pusher that takes over with the same lease does not find them
        in flight forever.
        """
        self._stopping = True
        self._wake.set()
        if flush and self.flights:
            await asyncio.wait(list(self.flights.values()), timeout=self.policy.timeout)
        now = self.dispatcher.app.clock.now()
        for delivery_id, flight in list(self.flights.items()):
            flight.cancel()
            self.ended.append(_lost(delivery_id, now))
            if self.dispatcher.metrics is not None:
                self.dispatcher.metrics.delivered(self.name, "lost", None)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if flush and self.ended:
            with contextlib.suppress(Exception):
                await self._record()
        self.dispatcher.faults.forget(self.name)

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
                await _sleep_or(self._wake, STORE_RETRY)
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
            log.warning(
                "subscription %s disabled: its target %s answered 410 Gone; resume it with "
                "`cronbus subs resume %s`",
                self.name,
                self.target.label,
                self.name,
                extra={"action": "subscription.disabled", "subscription": self.name},
            )
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
        # Ended pushes not recorded yet are still in flight in the store: count them too.
        free = limit - self.in_flight
        allowed = self.breaker.allowed(now, self.in_flight)
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
                self.rate.sent(started)
                try:
                    if delivery.event is None:
                        result = PushResult(ok=False, error=GONE_EVENT)
                    else:
                        async with asyncio.timeout(self.policy.timeout):
                            result = await self._traced_push(delivery, delivery.event)
                    timed_out = False
                except TimeoutError:
                    result = PushResult(ok=False, error=f"timed out after {self.policy.timeout}s")
                    timed_out = True
                except Exception as exc:  # a target bug must not kill the pusher
                    result = PushResult(ok=False, error=f"{type(exc).__name__}: {exc}")
                    timed_out = False
            recorded = self._result(delivery, result, started, clock.now(), timed_out)
            if self.dispatcher.metrics is not None:
                took = recorded.finished_at - started if delivery.event is not None else None
                self.dispatcher.metrics.delivered(self.name, delivery_outcome(recorded), took)
            # Appended before the flight is dropped, so the in-flight count never dips between.
            self.ended.append(recorded)
            self._report(delivery, recorded)
        finally:
            self.flights.pop(delivery.id, None)
            if is_retry:
                self.retries_in_flight -= 1
            self._wake.set()

    async def _traced_push(self, delivery: Delivery, event: EventRecord) -> PushResult:
        """Push under the delivery's span (a no-op without the ``otel`` extra)."""
        with tracing.delivery(self.name, self.target.label, delivery, event.trace) as span:
            result = await self.target.push(delivery, event)
            span.ended(result.ok, result.status, result.error)
        return result

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

    def _report(self, delivery: Delivery, result: DeliveryResult) -> None:
        """One warning per failed attempt and per dead letter (rate-limited per subscription)."""
        if result.outcome is DeliveryOutcome.ACKED:
            return
        faults, label = self.dispatcher.faults, self.target.label
        attempt = delivery.attempts + (1 if result.spend_attempt else 0)
        if result.retry_at is None:
            then = "no attempts left"
        elif not result.spend_attempt:
            then = "the subscription is disabled; the delivery waits for a resume"
        else:
            then = f"retry in {max(0.0, result.retry_at - result.finished_at):.1f} s"
        faults.failed(
            self.name, label, attempt=attempt, status=result.status, error=result.error, then=then
        )
        if result.retry_at is None:
            faults.dead(
                self.name,
                label,
                delivery=delivery.id,
                event_id=delivery.event_id,
                attempts=attempt,
                status=result.status,
                error=result.error,
            )

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


def delivery_outcome(result: DeliveryResult) -> str:
    """The ``outcome`` label of an ended push: acked; failed or timed_out with a retry ahead
    (a 410's wait for a resume included); dead with none left; lost."""
    if result.outcome is not DeliveryOutcome.ACKED and result.retry_at is None:
        return "dead"
    return result.outcome.value


def _lost(delivery_id: int, now: float) -> DeliveryResult:
    """A push cut short by a stop: due again at once, without spending an attempt."""
    return DeliveryResult(
        delivery_id=delivery_id,
        outcome=DeliveryOutcome.LOST,
        started_at=now,
        finished_at=now,
        error=LOST_AT_STOP,
        retry_at=now,
        spend_attempt=False,
    )


async def _sleep_or(event: asyncio.Event, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()
