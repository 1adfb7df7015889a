"""The worker: a short loop over the store that claims runs, executes them and reports back.

Background duties run beside the claim loop: heartbeats renew leases (and carry cancel
requests), a reaper requeues runs of lost workers and ages retries, and a completer records
outcomes in batches (whatever finished while the previous batch was being written).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._version import __version__
from ..config import Settings
from ..fairness import parse_queues, plan_shares
from ..model import ClaimedRun, ClaimRequest, Outcome, QueueShare, WorkerInfo, WorkerState
from ..states import AttemptOutcome
from ..store import CONTROL_CHANNEL, RUNS_CHANNEL, Listener, Store
from . import capture
from .execution import CANCELLED, LOST, SHUTDOWN, Executor

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("cronbus.worker")
_RETRY_STORE_SECONDS = 0.5


@dataclass(slots=True)
class _Active:
    claimed: ClaimedRun
    interrupt: asyncio.Future[str]
    task: asyncio.Task[None] | None = field(default=None)


class Completer:
    """Records outcomes in batches: everything that ended while the last write was busy."""

    def __init__(self, store: Store, app: App) -> None:
        self._store = store
        self._app = app
        self._pending: list[tuple[ClaimedRun, Outcome]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, claimed: ClaimedRun, outcome: Outcome) -> None:
        """Queue an outcome for the next batch."""
        self._pending.append((claimed, outcome))
        self._idle.clear()
        self._wake.set()

    async def run(self) -> None:
        """Write batches until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if batch:
                await self._write(batch)
            if not self._pending:
                self._idle.set()

    async def _write(self, batch: list[tuple[ClaimedRun, Outcome]]) -> None:
        outcomes = [outcome for _, outcome in batch]
        while True:
            try:
                done = await self._store.complete(outcomes, self._app.clock.now())
                break
            except Exception:
                log.exception("recording %d outcomes failed; trying again", len(batch))
                await asyncio.sleep(_RETRY_STORE_SECONDS)
        for (claimed, outcome), ok in zip(batch, done, strict=True):
            _report(claimed, outcome, ok)

    async def drain(self) -> None:
        """Wait until every queued outcome is written."""
        await self._idle.wait()


class Worker:
    """Claims and executes runs of an app's tasks from some queues."""

    def __init__(
        self,
        app: App,
        *,
        queues: str | Sequence[str] = "default",
        concurrency: int | None = None,
        settings: Settings | None = None,
        name: str | None = None,
    ) -> None:
        self.app = app
        self.settings = (settings or app.settings).with_overrides(concurrency=concurrency)
        self.queues = parse_queues(queues)
        self.concurrency = self.settings.concurrency
        self.id = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._active: dict[int, _Active] = {}
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()
        self._slot = asyncio.Event()
        self._beat_now = asyncio.Event()
        self._rotation = 0
        self.executor = Executor(
            app.tasks,
            clock=app.clock,
            concurrency=self.concurrency,
            log_limit=self.settings.log_limit,
            on_thread_freed=self._slot.set,
        )

    def request_stop(self, *, hurry: bool = False) -> None:
        """Begin draining: claim nothing more, let running attempts finish within the grace.

        ``hurry`` ends the grace at once: running attempts are interrupted and requeued.
        """
        if hurry:
            self._hurry.set()
        if not self._stopping.is_set():
            log.info("worker %s draining", self.id, extra={"action": "worker.drain"})
            self._stopping.set()
            self._slot.set()

    @property
    def store(self) -> Store:
        """The app's open store."""
        return self.app.store

    # -- lifecycle -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Work until :meth:`request_stop`, then drain and unregister."""
        now = self.app.clock.now()
        await self.store.register_worker(self._info(now, WorkerState.ALIVE))
        runs = await self.store.listen([RUNS_CHANNEL])
        control = await self.store.listen([CONTROL_CHANNEL])
        completer = Completer(self.store, self.app)
        helpers = [
            asyncio.create_task(completer.run(), name="cronbus-completer"),
            asyncio.create_task(self._heartbeats(control), name="cronbus-heartbeat"),
            asyncio.create_task(self._reaper(), name="cronbus-reaper"),
        ]
        self._completer = completer
        capture.install()
        log.info(
            "worker %s serving %s with concurrency %d",
            self.id,
            ",".join(f"{q}:{w}" if w != 1 else q for q, w in self.queues),
            self.concurrency,
            extra={"action": "worker.start"},
        )
        try:
            await self._claim_loop(runs)
            await self._drain()
            await completer.drain()
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await runs.close()
            await control.close()
            self.executor.shutdown()
            capture.uninstall()
            with contextlib.suppress(Exception):
                await self.store.set_worker_state(
                    self.id, WorkerState.STOPPED, self.app.clock.now()
                )
        log.info("worker %s stopped", self.id, extra={"action": "worker.stop"})

    def _info(self, now: float, state: WorkerState) -> WorkerInfo:
        return WorkerInfo(
            id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=[q for q, _ in self.queues],
            concurrency=self.concurrency,
            version=__version__,
            started_at=now,
            heartbeat_at=now,
            state=state,
        )

    async def _drain(self) -> None:
        with contextlib.suppress(Exception):
            await self.store.set_worker_state(self.id, WorkerState.DRAINING, self.app.clock.now())
        pending = {a.task for a in self._active.values() if a.task is not None}
        if pending:
            log.info("waiting up to %gs for %d attempts", self.settings.grace_seconds, len(pending))
            await self._grace(pending)
        self._interrupt_all(SHUTDOWN)
        rest = [a.task for a in self._active.values() if a.task is not None]
        if rest:
            await asyncio.wait(rest)

    async def _grace(self, pending: set[asyncio.Task[None]]) -> None:
        """Wait for ``pending`` until the grace period ends or a hurry is requested."""
        hurry = asyncio.ensure_future(self._hurry.wait())
        finished = asyncio.ensure_future(asyncio.wait(pending))
        try:
            await asyncio.wait(
                {hurry, finished},
                timeout=self.settings.grace_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            hurry.cancel()
            finished.cancel()

    def _interrupt_all(self, reason: str) -> None:
        for active in list(self._active.values()):
            if not active.interrupt.done():
                active.interrupt.set_result(reason)

    # -- claiming ------------------------------------------------------------------------------
    async def _claim_loop(self, runs: Listener) -> None:
        while not self._stopping.is_set():
            free = self.concurrency - len(self._active)
            if free <= 0 or self.executor.leaked >= self.executor.max_leaked:
                self._slot.clear()
                await self._slot.wait()
                continue
            try:
                claimed = await self._claim(free)
            except Exception:
                log.exception("claiming runs failed; trying again")
                await self._idle(runs, _RETRY_STORE_SECONDS)
                continue
            for run in claimed:
                self._start(run)
            if len(claimed) < free:
                await self._idle(runs, await self._idle_timeout())

    async def _claim(self, free: int) -> list[ClaimedRun]:
        shares = plan_shares(self.queues, free, self._rotation)
        self._rotation += 1
        request = ClaimRequest(
            worker_id=self.id,
            queues=[QueueShare(name=q, limit=n) for q, n in shares],
            limit=free,
            lease_seconds=self.settings.lease_seconds,
        )
        return await self.store.claim(request, self.app.clock.now())

    async def _idle_timeout(self) -> float:
        timeout = self.settings.poll_seconds
        try:
            eta = await self.store.next_eta([q for q, _ in self.queues])
        except Exception:
            return timeout
        if eta is not None:
            timeout = min(timeout, max(0.0, eta - self.app.clock.now()))
        return timeout

    async def _idle(self, runs: Listener, timeout: float) -> None:
        """Sleep until woken by new work, a freed slot, a stop, or ``timeout``."""
        if self._stopping.is_set():
            return
        waiter = asyncio.ensure_future(runs.wait(timeout))
        stopper = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            stopper.cancel()

    def _start(self, claimed: ClaimedRun) -> None:
        interrupt: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        active = _Active(claimed, interrupt)
        self._active[claimed.attempt_id] = active
        active.task = asyncio.create_task(self._attempt(active))

    async def _attempt(self, active: _Active) -> None:
        claimed = active.claimed
        try:
            outcome = await self.executor.run(claimed, active.interrupt)
        except Exception:
            log.exception("executing run %d crashed the worker's executor", claimed.run_id)
            outcome = None
        finally:
            del self._active[claimed.attempt_id]
            self._slot.set()
        if outcome is not None:
            self._completer.add(claimed, outcome)
        elif not active.interrupt.done():
            log.error(
                "run %d: attempt %d ended without an outcome", claimed.run_id, claimed.attempt_id
            )

    # -- background duties ---------------------------------------------------------------------
    async def _heartbeats(self, control: Listener) -> None:
        while True:
            await control.wait(self.settings.heartbeat_seconds)
            try:
                await self._heartbeat()
            except Exception:
                log.exception("heartbeat failed; leases may expire if this goes on")

    async def _heartbeat(self) -> None:
        mine = dict(self._active)
        held = await self.store.heartbeat(
            self.id, self.app.clock.now(), self.settings.lease_seconds
        )
        still = {h.attempt_id: h for h in held}
        for attempt_id, active in mine.items():
            entry = still.get(attempt_id)
            if active.interrupt.done():
                continue
            if entry is None:
                log.warning(
                    "run %d: lease lost; abandoning attempt %d", active.claimed.run_id, attempt_id
                )
                active.interrupt.set_result(LOST)
            elif entry.cancelling:
                active.interrupt.set_result(CANCELLED)

    async def _reaper(self) -> None:
        while True:
            try:
                now = self.app.clock.now()
                reaped = await self.store.reap(now, self.settings.max_lost)
                if reaped:
                    log.warning(
                        "requeued %d runs of lost workers: %s",
                        len(reaped),
                        reaped[:10],
                        extra={"action": "runs.reaped"},
                    )
                await self.store.age_retries(now, self.settings.retry_aging_seconds)
            except Exception:
                log.exception("reaping expired leases failed")
            pause = self.settings.lease_seconds / 2
            await asyncio.sleep(pause * (0.5 + random.random()))


def _report(claimed: ClaimedRun, outcome: Outcome, recorded: bool) -> None:
    """One log line per ended attempt, with a stable ``action`` field."""
    what = f"run {claimed.run_id} {claimed.task} attempt {claimed.attempt}"
    if not recorded:
        log.warning(
            "%s: lease no longer held; outcome %s dropped",
            what,
            outcome.outcome.value,
            extra={"action": "attempt.fenced"},
        )
        return
    kind = outcome.outcome.value
    if outcome.outcome is AttemptOutcome.SUCCEEDED:
        log.info("%s succeeded", what, extra={"action": "attempt.succeeded"})
        return
    error = outcome.error
    reason = f"{error.type}: {error.message}" if error else kind
    if outcome.outcome is AttemptOutcome.LOST:
        log.info(
            "%s stopped (%s); run queued again", what, reason, extra={"action": "attempt.lost"}
        )
    elif outcome.outcome is AttemptOutcome.CANCELLED:
        log.info("%s cancelled", what, extra={"action": "attempt.cancelled"})
    elif outcome.retry_at is not None:
        delay = max(0.0, outcome.retry_at - time.time())
        log.info(
            "%s %s (%s); retry in %.1fs",
            what,
            kind,
            reason,
            delay,
            extra={"action": "attempt.retry"},
        )
    else:
        log.warning(
            "%s %s (%s); run is dead (dead letter)",
            what,
            kind,
            reason,
            extra={"action": "run.dead"},
        )
