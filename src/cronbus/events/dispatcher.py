"""The dispatcher: holds subscriptions' pushers by lease and pushes their deliveries.

One :class:`Dispatcher` per process. Every ``lease_seconds / 3`` it renews its leases and takes
free ones (a pusher moves to another process when its holder dies); for each subscription it
holds it runs a :class:`~cronbus.events.pusher.Pusher` (record, match, take; see there).

Isolation (invariant 5): each pusher has its own in-flight limit, a fair share of the shared
pool, so a slow or failing target only ever fills its own slots; retries use at most a quarter of
a pusher's slots, so a dead endpoint's retries never starve first attempts; a maximum execution
time interrupts each push; a target that keeps failing gets its circuit opened and is probed.

Nothing fails silently: every failed attempt and every dead letter is a WARNING naming the
subscription, the target's host and the status or error, rate-limited per subscription
(:mod:`.faultlog`). Webhooks go through one HTTP session whose resolver refuses the networks of
:mod:`.netpolicy` after DNS resolution; in-process sync handlers run on the dispatcher's own
thread pool, interrupted at their timeout (:mod:`.handlers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

import aiohttp
from aiohttp.abc import AbstractResolver

from ..store.ports import EVENTS_CHANNEL, SUBSCRIPTIONS_CHANNEL, EventStore, wait_any
from .faultlog import FaultLog
from .handlers import HandlerPool
from .netpolicy import NetPolicy
from .pacing import Circuit
from .pusher import GONE_EVENT, RETRY_SHARE, STORE_RETRY, Pusher
from .records import Subscription
from .resolvers import FilteringResolver
from .targets import Handler, build_target

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("cronbus.dispatcher")

__all__ = ["GONE_EVENT", "RETRY_SHARE", "Dispatcher", "Pusher"]

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
        policy: NetPolicy | None = None,
        resolver: AbstractResolver | None = None,
        handler_threads: int | None = None,
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
        self.faults = FaultLog(log)
        self.policy = policy if policy is not None else NetPolicy.from_env()
        # The resolver only names where hosts are; the policy decides after it.
        self._resolver = resolver
        self.handler_threads = handler_threads or min(32, self.pool)
        self.handler_pool = HandlerPool(self.handler_threads)
        self._client: aiohttp.ClientSession | None = None
        self.metrics = app.metrics
        """The app's metrics (None when switched off): pushes ended, circuits."""

    @property
    def circuits(self) -> dict[str, bool]:
        """Whether the circuit of each subscription held is open (or probing)."""
        return {name: p.breaker.state is not Circuit.CLOSED for name, p in self.pushers.items()}

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
        resolver = FilteringResolver(self.policy, self._resolver)
        if self.handler_pool.closed:
            self.handler_pool = HandlerPool(self.handler_threads)
        self._client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.pool, limit_per_host=0, resolver=resolver),
            timeout=aiohttp.ClientTimeout(total=None),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        listener = await self.app.store.listen([EVENTS_CHANNEL])
        changes = await self.app.store.listen([SUBSCRIPTIONS_CHANNEL])
        log.info("dispatcher %s started", self.id, extra={"action": "dispatcher.start"})
        if self.metrics is not None:
            self.metrics.circuits.add(self)
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
                        balance_at = loop.time() + STORE_RETRY
                # New events wake the pushers only; leases are renewed on their own clock,
                # or at once when subscriptions change.
                woken = await wait_any((listener, changes), stopping, balance_at - loop.time())
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
            await resolver.close()
            self.handler_pool.shutdown()
            if self.metrics is not None:
                self.metrics.circuits.discard(self)
            log.info("dispatcher %s stopped", self.id, extra={"action": "dispatcher.stop"})

    async def _balance(self) -> None:
        """Renew leases, take free ones, and start or stop pushers to match."""
        now = self.app.clock.now()
        leases = await self.store.acquire_subscriptions(
            self.id, now, self.lease_seconds, self.max_subscriptions
        )
        held = {lease.subscription: lease for lease in leases}
        subs = {s.name: s for s in await self.store.list_subscriptions()}
        for name in [n for n in self.pushers if n not in held]:
            _let_go(name, subs.get(name))
            await self.pushers.pop(name).stop(flush=False)
        self.faults.flush()
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
                sub.spec,
                app=self.app,
                client=self.client,
                handlers=self.handlers,
                handler_pool=self.handler_pool,
                policy=self.policy,
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


def _let_go(name: str, sub: Subscription | None) -> None:
    """Say why a pusher stops: its subscription was deleted or paused, or the lease moved."""
    if sub is None:
        log.info("subscription %s was deleted; its pusher stops", name)
    elif sub.paused:
        # Pausing (by a person, or by the pusher after a 410) lets go of the lease: that is
        # not a lost lease, and the 410 was already reported by the pusher.
        why = sub.disabled_reason or "paused"
        log.info("subscription %s is paused (%s); its pusher stops", name, why)
    else:
        log.warning(
            "lost the lease of subscription %s (another dispatcher holds it now, or this one "
            "could not renew it in time)",
            name,
        )
