"""Retention: finished runs, ended deliveries and old events removed in small batches, by the
one process of the cluster that holds the ``retention`` lease.

::

    retention = Retention.for_app(app)          # rules from app.settings and each task's keep
    await retention.run(stop)                   # a loop: a pass every retention_period_seconds
    report = await retention.pass_once()        # or one pass, now (tests, `cronbus runs purge`)

A pass walks each namespace's finished runs oldest first (a keyset, so the runs it keeps are read
once per pass), decides in Python which are due (:mod:`.retention_policy`: the run's state, its
task's ``keep``, the store's defaults) and hands the store batches of at most
``retention_batch`` runs, each deleted in one short transaction (what the store re-checks there
is in :mod:`cronbus.store.retention_ports`). Then each subscription's acked and dead
deliveries, then events of every topic: its own ``max_age``/``max_events``, or the store's
default when it sets neither.
On SQLite each batch is followed by an incremental vacuum of the pages it freed.

Nothing live is touched (invariant 6): a run that is not finished, the parent of a live child,
a child whose parent is kept, a delivery that is not acked or dead, an event a live delivery
needs or that a subscription's cursor has not passed. The lease only keeps two processes from
doing the same work twice; a pass that loses it stops at its next renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..clock import Clock, SystemClock
from ..events.states import DeliveryState
from ..states import RunState
from ..store.retention_ports import FinishedRun, Purged
from .retention_policy import RetentionRules, rules_for

if TYPE_CHECKING:
    from ..app import App
    from ..store import Store

__all__ = ["LEASE", "Pacer", "PurgeReport", "Retention", "purge_finished"]

LEASE = "retention"
"""The name of the role lease whose holder applies retention."""
RECLAIM_PAGES = 256
"""Free pages an incremental vacuum after a batch gives back at most: about 0.1 ms a page (it
moves pages from the end of the file into the holes), and a batch frees fewer than this."""
_RENEW_EVERY = 20
"""Batches between renewals of the lease during a long pass."""
_SMALLEST = 16
"""The smallest batch the pacer goes down to."""
log = logging.getLogger("cronbus.retention")


@dataclass(slots=True, kw_only=True)
class PurgeReport:
    """What a pass (or a purge) removed, and how long its transactions held their locks."""

    runs: int = 0
    deliveries: int = 0
    events: int = 0
    pages: int = 0
    """Pages given back to the file system (SQLite)."""
    batches: int = 0
    """Deleting transactions (incremental vacuums included)."""
    longest: float = 0.0
    """The longest any of them held its locks, in seconds."""
    durations: list[float] = field(default_factory=list, repr=False)
    """Each transaction's lock time, in order (for measurements)."""
    complete: bool = True
    """False when the pass stopped early (the lease was lost, or a purge's limit was reached)."""

    def count(self, purged: Purged) -> None:
        """Add one transaction's figures (the caller adds its rows to the right total)."""
        self.batches += 1
        self.longest = max(self.longest, purged.seconds)
        self.durations.append(purged.seconds)


class Pacer:
    """The size of the next batch: at most ``most`` rows, halved after a transaction that
    held its locks longer than ``budget`` seconds and grown back after quick ones, so each
    transaction stays short however slow the machine is at the moment (a busy machine's
    scheduler stretches every transaction's wall time)."""

    def __init__(self, most: int, budget: float = 0.025) -> None:
        self.most = most
        self.size = most
        self.budget = budget

    def record(self, seconds: float) -> None:
        """Adjust the size after a transaction that took ``seconds``."""
        if seconds > self.budget and self.size > _SMALLEST:
            self.size = max(_SMALLEST, self.size // 2)
        elif seconds < self.budget / 2 and self.size < self.most:
            self.size = min(self.most, self.size * 2)


class LeaseLost(Exception):
    """The retention lease went to another process in the middle of a pass."""


class Retention:
    """Applies retention rules to one store (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        rules: RetentionRules | None = None,
        clock: Clock | None = None,
        holder: str | None = None,
        period: float = 300.0,
        batch: int = 500,
        lease_seconds: float | None = None,
        on_pass: Callable[[PurgeReport], None] | None = None,
    ) -> None:
        if period <= 0:
            raise ValueError(f"period must be more than zero seconds, got {period!r}")
        if batch < 1:
            raise ValueError(f"batch must be a whole number from 1, got {batch!r}")
        self.store = store
        self.rules = rules or RetentionRules()
        self.clock: Clock = clock or SystemClock()
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:retention"
        self.period = period
        self.batch = batch
        # Longer than the period, so a live holder keeps the lease from one pass to the next.
        self.lease_seconds = lease_seconds or max(60.0, 3 * period)
        self.on_pass = on_pass
        """Called with the report of each pass the loop makes (metrics, tests)."""
        self._renewed = 0

    @classmethod
    def for_app(cls, app: App, *, holder: str | None = None) -> Retention:
        """Retention of ``app``'s store, with its settings, its tasks' ``keep`` and its clock."""
        settings = app.settings
        return cls(
            app.store,
            rules=rules_for(settings, app.tasks.values()),
            clock=app.clock,
            holder=holder,
            period=settings.retention_period_seconds,
            batch=settings.retention_batch,
        )

    # -- the loop ------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Apply retention every ``period`` while holding the lease, until ``stop`` is set;
        give the lease up on the way out. Errors are logged and retried at the next period."""
        try:
            while not stop.is_set():
                await self._turn()
                await self._wait(stop)
        finally:
            with contextlib.suppress(Exception):
                await self.store.release_lease(LEASE, self.holder)

    async def _turn(self) -> None:
        try:
            if not await self._hold():
                return
            report = await self.pass_once()
        except Exception:
            log.exception("retention pass failed; it is tried again next period")
            return
        if self.on_pass is not None:
            self.on_pass(report)
        if report.runs or report.deliveries or report.events:
            log.info(
                "retention removed %d runs, %d deliveries, %d events in %d transactions "
                "(longest %.1f ms)",
                report.runs,
                report.deliveries,
                report.events,
                report.batches,
                report.longest * 1000,
                extra={"action": "retention.pass"},
            )

    async def _wait(self, stop: asyncio.Event) -> None:
        """Wait one period of the app's clock, or until ``stop``."""
        sleeping = asyncio.ensure_future(self.clock.sleep(self.period))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeping, stopping):
                task.cancel()
            await asyncio.gather(sleeping, stopping, return_exceptions=True)

    async def _hold(self) -> bool:
        return await self.store.hold_lease(LEASE, self.holder, self.clock.now(), self.lease_seconds)

    async def _renew(self) -> None:
        """Renew the lease every few batches of a long pass; stop the pass if it was lost."""
        self._renewed += 1
        if self._renewed % _RENEW_EVERY == 0 and not await self._hold():
            raise LeaseLost

    # -- one pass ------------------------------------------------------------------------------
    async def pass_once(self, now: float | None = None) -> PurgeReport:
        """Apply every rule once, at ``now`` (default the clock's). The loop takes the lease
        first; a long pass renews it every few batches (taking it when it is free) and stops,
        ``complete`` False, when another process holds it. Returns what was removed."""
        now = self.clock.now() if now is None else now
        report = PurgeReport()
        try:
            for namespace in await self._namespaces():
                await self._runs(report, namespace, now)
            await self._deliveries(report, now)
            await self._events(report, now)
            await drain_free(self.store, report)
        except LeaseLost:
            report.complete = False
            log.warning("retention lease lost mid-pass; its new holder goes on")
        return report

    async def _namespaces(self) -> list[str]:
        # The runs' own: a namespace is not always registered before runs are deferred in it.
        return await self.store.run_namespaces()

    async def _runs(self, report: PurgeReport, namespace: str, now: float) -> None:
        """Every finished run of ``namespace`` that its rule lets go, oldest first."""
        await purge_finished(
            self.store,
            report,
            namespace=namespace,
            before=now - self.rules.shortest_run_keep(),
            due=lambda run: self.rules.purges(run.state, run.task, run.finished_at, now),
            batch=self.batch,
            renew=self._renew,
        )

    async def _deliveries(self, report: PurgeReport, now: float) -> None:
        for subscription in await self.store.list_subscriptions():
            policy = subscription.spec.policy
            ages = (
                (DeliveryState.ACKED, _own(policy, "keep_acked", self.rules.acked)),
                (DeliveryState.DEAD, _own(policy, "keep_dead", self.rules.dead_deliveries)),
            )
            for state, age in ages:
                pacer = Pacer(self.batch)
                while True:
                    size = pacer.size
                    purged = await self.store.purge_deliveries(
                        subscription.id, state, now - age, size
                    )
                    pacer.record(purged.seconds)
                    report.count(purged)
                    report.deliveries += purged.removed
                    await self._reclaim(report, purged.removed)
                    await self._renew()
                    if purged.removed < size:
                        break

    async def _events(self, report: PurgeReport, now: float) -> None:
        for topic in await self.store.list_topics():
            cut = 0
            if topic.max_events is not None:
                cut = max(cut, topic.last_offset - topic.max_events)
            age = topic.max_age
            if age is None and topic.max_events is None:
                age = self.rules.events
            if age is not None:
                cut = max(cut, await self.store.offset_at(topic.name, now - age))
            after: int | None = 0
            pacer = Pacer(self.batch)
            while cut > 0 and after is not None:
                purged = await self.store.purge_events(topic.name, after, cut, pacer.size)
                pacer.record(purged.seconds)
                report.count(purged)
                report.events += purged.removed
                await self._reclaim(report, purged.removed)
                await self._renew()
                after = purged.last

    async def _reclaim(self, report: PurgeReport, removed: int) -> None:
        await reclaim(self.store, report, removed)


def _own(policy: object, name: str, default: float) -> float:
    """A subscription's own keep (a delivery policy field), or ``default``."""
    value = getattr(policy, name, None)
    return default if value is None else float(value)


async def purge_finished(
    store: Store,
    report: PurgeReport,
    *,
    namespace: str,
    before: float,
    due: _Due,
    batch: int,
    renew: _Renew | None = None,
    states: Sequence[RunState] | None = None,
    most: int | None = None,
) -> None:
    """Remove the finished runs of ``namespace`` that ended at or before ``before`` and that
    ``due`` lets go, oldest first, ``batch`` at a time; at most ``most`` (then
    ``report.complete`` is False: call again to go on).

    A sweep reads the range once; when it removed a parent, the children it passed over (held
    then, orphans now) are picked up by one more sweep.
    """
    while True:
        removed, held = await _sweep(
            store, report, namespace, before, due, batch, renew, states, most
        )
        if not report.complete or not (removed and held):
            return


async def _sweep(
    store: Store,
    report: PurgeReport,
    namespace: str,
    before: float,
    due: _Due,
    batch: int,
    renew: _Renew | None,
    states: Sequence[RunState] | None,
    most: int | None,
) -> tuple[int, bool]:
    """One read of the range: how many runs it removed, and whether it passed held ones."""
    after: tuple[float, int] | None = None
    removed, held = 0, False
    pacer = Pacer(batch)
    while True:
        size = pacer.size if most is None else max(1, min(pacer.size, most - report.runs))
        found = await store.finished_runs(namespace, before, after, size, states)
        if not found:
            return removed, held
        after = (found[-1].finished_at, found[-1].id)
        held = held or any(run.held for run in found)
        doomed = [run for run in found if not run.held and due(run)]
        if doomed:
            purged = await store.purge_runs(doomed)
            pacer.record(purged.seconds)
            report.count(purged)
            report.runs += purged.removed
            removed += purged.removed
            await reclaim(store, report, purged.removed)
        if renew is not None:
            await renew()
        if len(found) < size:
            return removed, held
        if most is not None and report.runs >= most:
            report.complete = False
            return removed, held


async def drain_free(store: Store, report: PurgeReport) -> None:
    """At the end of a pass, give back what the batches' vacuums left (one batch may free more
    pages than its vacuum takes), in transactions of at most :data:`RECLAIM_PAGES` pages."""
    while True:
        reclaimed = await store.reclaim_space(RECLAIM_PAGES)
        if not reclaimed.removed:
            return
        report.count(reclaimed)
        report.pages += reclaimed.removed


async def reclaim(store: Store, report: PurgeReport, removed: int) -> None:
    """After a batch that removed rows, give the pages it freed back (SQLite)."""
    if removed <= 0:
        return
    reclaimed = await store.reclaim_space(RECLAIM_PAGES)
    if reclaimed.removed:
        report.count(reclaimed)
        report.pages += reclaimed.removed


if TYPE_CHECKING:
    _Due = Callable[[FinishedRun], bool]
    _Renew = Callable[[], Awaitable[None]]
