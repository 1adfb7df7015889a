"""The worker: a short loop over the store that claims runs, executes them and reports back.

The claim loop is the worker's only writer of outcomes: each turn records every attempt that
ended since the last turn and claims runs for the free slots, in one transaction, so a busy
worker costs the store one transaction per batch, not two per run. Background duties run beside
it: heartbeats renew leases (and carry cancel requests, and show claims the worker never
learnt of, which it gives up: see :mod:`.orphans`), and a reaper requeues runs of lost workers
and ages retries.

A worker serves named queues (``"default,emails:3"``) or, by default, every queue (``"*"``),
including queues first used after it started (see :mod:`.serving`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..config import Settings
from ..fairness import EVERY_QUEUE, plan_slots, spare_shares
from ..model import ClaimedRun, ClaimRequest, Outcome, WorkerInfo, WorkerState
from ..observability.logs import RunFields, bound_run
from ..store import CONTROL_CHANNEL, RUNS_CHANNEL, Listener, Store
from . import capture
from .execution import CANCELLED, LOST, SHUTDOWN, THREAD_POLITE_SECONDS, Executor
from .orphans import Holdings, give_up_orphans
from .outcomes import RunEvents
from .reaping import reap_forever
from .report import report_all
from .serving import Serving, check_labels

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("cronbus.worker")
_RETRY_STORE_SECONDS = 0.5
_FOREVER = 3600.0
_RECORD_RETRIES = (0.1, 0.5, 1.0, 2.0, 5.0)
_CANCEL_AGAIN_SECONDS = 0.5
"""How long a stopping worker waits for its helper tasks before cancelling them again."""


@dataclass(slots=True)
class _Active:
    claimed: ClaimedRun
    interrupt: asyncio.Future[str]
    task: asyncio.Task[None] | None = field(default=None)


class Worker:
    """Claims and executes runs of an app's tasks from some queues (by default every queue),
    of the app's namespace only."""

    def __init__(
        self,
        app: App,
        *,
        queues: str | Sequence[str] = EVERY_QUEUE,
        concurrency: int | None = None,
        settings: Settings | None = None,
        name: str | None = None,
        labels: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.labels = check_labels(labels)
        self.settings = (settings or app.settings).with_overrides(concurrency=concurrency)
        self.serving = Serving(queues)
        self.concurrency = self.settings.concurrency
        self.id = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._active: dict[int, _Active] = {}
        self.holdings = Holdings()
        self._ended: list[tuple[ClaimedRun, Outcome]] = []
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()
        self._wake = asyncio.Event()
        self._rotation = 0
        self._tasks = sorted(app.tasks)
        self.run_events = RunEvents(app)
        self.metrics = app.metrics
        """The app's metrics (None when switched off): attempts started, ended, recorded."""
        self.executor = Executor(
            app.tasks,
            clock=app.clock,
            concurrency=self.concurrency,
            log_limit=self.settings.log_limit,
            on_thread_freed=self._wake.set,
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
            self._wake.set()

    @property
    def store(self) -> Store:
        """The app's open store."""
        return self.app.store

    # -- lifecycle -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Work until :meth:`request_stop`, then drain and unregister."""
        self._tasks = sorted(self.app.tasks)
        now = self.app.clock.now()
        await self.store.register_worker(self._info(now, WorkerState.ALIVE))
        runs = await self.store.listen([RUNS_CHANNEL])
        control = await self.store.listen([CONTROL_CHANNEL])
        helpers = [
            asyncio.create_task(self._heartbeats(control), name="cronbus-heartbeat"),
            asyncio.create_task(
                reap_forever(self.store, self.app.clock, self.settings, self.metrics),
                name="cronbus-reaper",
            ),
            asyncio.create_task(self._forward_wakeups(runs), name="cronbus-wakeups"),
        ]
        capture.install()
        if self.metrics is not None:
            self.metrics.slots.add(self)
        if not self._tasks:
            log.warning(
                "worker %s knows no task (is --app given?): it claims nothing; runs wait for "
                "a worker whose code knows their task",
                self.id,
                extra={"action": "worker.no_tasks"},
            )
        log.info(
            "worker %s serving %s of namespace %s with concurrency %d",
            self.id,
            self.serving.describe(),
            self.app.namespace,
            self.concurrency,
            extra={"action": "worker.start"},
        )
        try:
            await self._claim_loop()
            await self._drain()
            await self.run_events.drain()
            await self._release_threads()
        finally:
            await _cancel_all(helpers)
            await runs.close()
            await control.close()
            self.executor.shutdown()
            capture.uninstall()
            if self.metrics is not None:
                self.metrics.slots.discard(self)
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
            queues=self.serving.registered,
            labels=list(self.labels),
            concurrency=self.concurrency,
            version=__version__,
            started_at=now,
            heartbeat_at=now,
            state=state,
            namespace=self.app.namespace,
            tasks=self._tasks,
            lease_seconds=self.settings.lease_seconds,
        )

    async def _drain(self) -> None:
        """Let running attempts finish within the grace period, recording them as they end;
        then interrupt the rest (their runs are requeued) and record those too."""
        with contextlib.suppress(Exception):
            await self.store.set_worker_state(self.id, WorkerState.DRAINING, self.app.clock.now())
        if self._active:
            log.info(
                "waiting up to %gs for %d attempts", self.settings.grace_seconds, len(self._active)
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.grace_seconds
        while self._active and not self._hurry.is_set() and loop.time() < deadline:
            self._wake.clear()
            await self._record(self._take_ended())
            await _first(self._wake.wait(), self._hurry.wait(), timeout=deadline - loop.time())
        self._interrupt_all(SHUTDOWN)
        rest = [a.task for a in self._active.values() if a.task is not None]
        if rest:
            await asyncio.wait(rest)
        await self._record(self._take_ended())

    async def _release_threads(self) -> None:
        """Give interrupted thread tasks the moment they need to stop, then say how many did
        not: a thread blocked outside Python code (``time.sleep``, a socket read, C code)
        cannot be stopped, and it is left behind (its run was queued again)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * THREAD_POLITE_SECONDS
        while self.executor.leaked and loop.time() < deadline:
            self._wake.clear()
            await _first(self._wake.wait(), timeout=deadline - loop.time())
        if self.executor.leaked:
            log.warning(
                "worker %s: %d thread task(s) still running, blocked outside Python code; "
                "abandoned (their runs were queued again)",
                self.id,
                self.executor.leaked,
                extra={"action": "worker.abandoned"},
            )

    @property
    def busy(self) -> int:
        """Slots running an attempt now."""
        return len(self._active)

    @property
    def abandoned(self) -> int:
        """Thread tasks this worker interrupted that are still running (stuck in C code)."""
        return self.executor.leaked

    def _take_ended(self) -> list[tuple[ClaimedRun, Outcome]]:
        ended, self._ended = self._ended, []
        return ended

    async def _record(self, ended: list[tuple[ClaimedRun, Outcome]]) -> None:
        """Record outcomes alone (no claim), trying again while the store fails."""
        if not ended:
            return
        for pause in _RECORD_RETRIES:
            try:
                done = await self.store.complete([o for _, o in ended], self.app.clock.now())
            except Exception:
                log.exception("recording %d outcomes failed; trying again", len(ended))
                await asyncio.sleep(pause)
                continue
            self._settle(ended, done)
            return
        # Given up, the attempts are unknown to the worker: heartbeats requeue them as orphans.
        self._settle(ended, None)
        log.error("gave up recording %d outcomes; their runs will be requeued", len(ended))

    def _settle(self, ended: list[tuple[ClaimedRun, Outcome]], done: list[bool] | None) -> None:
        """Forget attempts whose outcomes the store answered (``done``; None: given up)."""
        for claimed, _ in ended:
            self.holdings.settled(claimed)
        if done is not None:
            report_all(ended, done)
            self.run_events.ended(ended, done)
            if self.metrics is not None:
                self.metrics.runs_recorded(ended, done)

    def _interrupt_all(self, reason: str) -> None:
        for active in list(self._active.values()):
            if not active.interrupt.done():
                active.interrupt.set_result(reason)

    # -- claiming ------------------------------------------------------------------------------
    async def _forward_wakeups(self, runs: Listener) -> None:
        """Turn nudges from the store (new or requeued runs) into the worker's wake event."""
        while True:
            if await runs.wait(_FOREVER):
                self.serving.mark_stale()
                self._wake.set()

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            ended = self._take_ended()
            free = self._free()
            if free == 0 and not ended:
                await self._wake.wait()
                continue
            claimed: list[ClaimedRun] | None = None
            asked = 0
            with self.holdings.claiming():
                try:
                    claimed, asked = await self._exchange(ended, free)
                except Exception:
                    self._ended[:0] = ended
                    log.exception("recording outcomes and claiming runs failed; trying again")
                # No await before this: a heartbeat must not see the claim ended and its runs
                # unknown (it would take them for orphans).
                for run in claimed or ():
                    self._start(run)
            if claimed is None:
                await self._idle(_RETRY_STORE_SECONDS)
                continue
            # The slot plan may ask for fewer runs than there are free slots (slots kept for
            # other queues): a claim that got all it asked for is not a sign of an empty store.
            again = self.serving.claim_again(asked, len(claimed)) if asked else False
            if len(claimed) < free and not self._ended and not again:
                await self._idle(await self._idle_timeout())

    def _free(self) -> int:
        """Slots to claim for: none while too many abandoned threads are still running."""
        if self.executor.leaked >= self.executor.max_leaked:
            return 0
        return max(0, self.concurrency - len(self._active))

    async def _exchange(
        self, ended: list[tuple[ClaimedRun, Outcome]], free: int
    ) -> tuple[list[ClaimedRun], int]:
        """Record what ended and claim up to ``free`` runs, in one store transaction; return
        the runs claimed and how many were asked for (the slot plan's total)."""
        loop, now = asyncio.get_running_loop(), self.app.clock.now()
        queues = (
            await self.serving.refresh(self.store, now, loop.time(), self.app.namespace)
            if free
            else ()
        )
        shares = []
        if free and queues:
            # Slots are planned over the whole worker, counting the runs executing per queue,
            # so a queue full of long runs never takes the slot another queue's next run needs.
            busy = Counter(active.claimed.queue for active in self._active.values())
            others = self.serving.recent(loop.time())
            shares = plan_slots(queues, self.concurrency, busy, self._rotation, others)
            shares += spare_shares(queues, self.concurrency, busy, shares, others)
        self._rotation += 1
        asked = min(free, sum(share.limit for share in shares))
        request = ClaimRequest(
            worker_id=self.id,
            queues=shares,
            limit=asked,
            lease_seconds=self.settings.lease_seconds,
            namespace=self.app.namespace,
            tasks=self._tasks,
            labels=self.labels,
        )
        done, claimed = await self.store.complete_and_claim(
            [outcome for _, outcome in ended], request, self.app.clock.now()
        )
        self._settle(ended, done)
        return claimed, asked

    async def _idle_timeout(self) -> float:
        timeout = self.settings.poll_seconds
        try:
            eta = await self.store.next_eta(self.serving.eta_queues, self.app.namespace)
        except Exception:
            return timeout
        if eta is not None:
            timeout = min(timeout, max(0.0, eta - self.app.clock.now()))
        return timeout

    async def _idle(self, timeout: float) -> None:
        """Sleep until woken (new work, an ended attempt, a freed thread, a stop) or ``timeout``.

        Every source of work sets the one ``_wake`` event, so an idle turn costs no new tasks.
        """
        if self._stopping.is_set():
            return
        try:
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        except TimeoutError:
            # Runs may have come due, or appeared without a wake-up (a lost nudge): look again.
            self.serving.mark_stale()

    def _start(self, claimed: ClaimedRun) -> None:
        interrupt: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        active = _Active(claimed, interrupt)
        self._active[claimed.attempt_id] = active
        self.holdings.claimed(claimed)
        if self.metrics is not None:
            self.metrics.run_started(claimed.queue, self.app.clock.now() - claimed.eta)
        active.task = asyncio.create_task(self._attempt(active))

    async def _attempt(self, active: _Active) -> None:
        claimed = active.claimed
        started = asyncio.get_running_loop().time()
        try:
            # The attempt's own task: what it logs, and what is logged on its behalf, names it.
            fields = RunFields(claimed.run_id, claimed.number, claimed.task, claimed.queue)
            with bound_run(fields):
                outcome = await self.executor.run(claimed, active.interrupt)
            if self.metrics is not None:
                seconds = asyncio.get_running_loop().time() - started
                self.metrics.attempt_ended(claimed.task, claimed.queue, seconds)
        except Exception:
            log.exception("executing run %d crashed the worker's executor", claimed.run_id)
            outcome = None
        finally:
            del self._active[claimed.attempt_id]
            self._wake.set()
        if outcome is not None:
            self._ended.append((claimed, outcome))
            self._wake.set()
            return
        self.holdings.settled(claimed)  # given up: if the store still has it, it is an orphan
        if not active.interrupt.done():
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
        beat = await self.store.beat(self.id, self.app.clock.now(), self.settings.lease_seconds)
        held = beat.held
        if beat.drain_requested and not self._stopping.is_set():
            # An operator's drain (`cronbus workers drain`, the API) is a SIGTERM from afar.
            log.info(
                "worker %s: drain requested by an operator; finishing running attempts, then "
                "stopping",
                self.id,
                extra={"action": "worker.drain_requested"},
            )
            self.request_stop()
        still = {h.attempt_id: h for h in held}
        for attempt_id, active in mine.items():
            entry = still.get(attempt_id)
            # An attempt recorded while the heartbeat was on its way is not lost: it is done.
            if active.interrupt.done() or attempt_id not in self._active:
                continue
            # Another fence: the attempt id was claimed again (by this worker's id, but not by
            # this claim), so this claim no longer holds the run.
            if entry is None or entry.fence != active.claimed.fence:
                log.warning(
                    "run %d: lease lost; abandoning attempt %d", active.claimed.run_id, attempt_id
                )
                active.interrupt.set_result(LOST)
            elif entry.cancelling:
                active.interrupt.set_result(CANCELLED)
        orphans = self.holdings.orphans(held)
        if orphans:
            await give_up_orphans(self.store, self.id, orphans, self.app.clock.now())


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended.

    A cancel can be swallowed: ``asyncio.wait_for`` on Python 3.11 (inside psycopg_pool's
    ``getconn``) drops one that arrives as its inner wait completes, and the task carries on.
    Cancelling again until each has ended keeps a stopping worker from waiting forever.
    """
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_CANCEL_AGAIN_SECONDS)


async def _first(*waits: Coroutine[Any, Any, Any], timeout: float | None = None) -> None:
    """Wait until the first of ``waits`` is done (or ``timeout``), and cancel the others."""
    tasks = {asyncio.ensure_future(w) for w in waits}
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
