"""What every running connector task shares: its lease, its stop, its failure, and store calls
that outlast a store outage.

A :class:`TaskRunner` runs one task this worker holds, as an asyncio task. It ends when it is
stopped (the lease was let go or moved, or the worker stops), when the lease turns out to be
lost (a fenced commit), or when the task fails; a failure is recorded in the store with its
reason (state ``failed``), so ``connectors show`` says why.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..clock import Clock
from ..errors import ConflictError, InvalidArgumentError
from ..store.connector_ports import ConnectorStore
from .api import TaskError
from .calls import backoff, describe
from .records import Connector, ConnectorLease, ConnectorTask, Tolerance

if TYPE_CHECKING:
    from ..store.ports import Events

log = logging.getLogger("cronbus.connectors")

T = TypeVar("T")

STOP_SECONDS = 10.0
"""How long a stopping task gets to end its current step before it is cancelled."""


class LeaseLost(Exception):
    """The task's lease moved on (fenced commit): stop without writing anything more."""


class TaskFailed(Exception):
    """The task cannot go on (tolerance ``none``, or a failure that is not a record's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """What a runner needs from the worker: its store, clock and pacing."""

    store: ConnectorStore
    events: Events
    """The same store, in its event role (a sink reads its topic)."""
    clock: Clock
    poll_seconds: float = 1.0
    batch: int = 1000


class TaskRunner(abc.ABC):
    """Runs one connector task held by this worker."""

    def __init__(
        self, setting: Setting, lease: ConnectorLease, connector: Connector, task: ConnectorTask
    ) -> None:
        self.setting = setting
        self.lease = lease
        self.connector = connector
        self.task = task
        self.stopping = asyncio.Event()
        self._woken = asyncio.Event()
        self._job: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """``connector#index``, for logs."""
        return f"{self.connector.name}#{self.task.index}"

    @property
    def tolerance(self) -> Tolerance:
        """What a record that fails for good does."""
        return self.connector.spec.tolerance

    @property
    def running(self) -> bool:
        """True until the task ended (stopped, lost, failed)."""
        return self._job is not None and not self._job.done()

    def start(self) -> None:
        """Run the task in the background."""
        self._job = asyncio.create_task(self._main(), name=f"connector {self.name}")

    def wake(self) -> None:
        """Something changed (new events in the topic): look again now."""
        self._woken.set()

    async def stop(self) -> None:
        """Ask the task to stop, wait for its current step, cancel it if it takes too long."""
        self.stopping.set()
        self._woken.set()
        if self._job is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._job), timeout=STOP_SECONDS)
        except TimeoutError:
            self._job.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._job

    async def _main(self) -> None:
        log.info("connector task %s started (epoch %d)", self.name, self.lease.epoch)
        try:
            await self.run()
        except LeaseLost:
            log.warning("connector task %s lost its lease; it stops", self.name)
        except TaskFailed as failed:
            await self._fail(str(failed))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("connector task %s failed", self.name)
            await self._fail(describe(exc))
        finally:
            await self.close()
            log.info("connector task %s stopped", self.name)

    async def _fail(self, reason: str) -> None:
        log.error("connector task %s failed: %s", self.name, reason)
        try:
            await self.setting.store.fail_connector_task(
                self.lease, reason, self.setting.clock.now()
            )
        except Exception:
            # Not recorded: the lease runs out and another worker tries the task again.
            log.exception("connector task %s: recording its failure failed", self.name)

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` or until woken; False when stopping."""
        if self.stopping.is_set():
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._woken.wait(), timeout=seconds)
        self._woken.clear()
        return not self.stopping.is_set()

    async def stored(self, what: str, step: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run a store call, trying again with backoff while the store fails (a store outage
        is nobody's record's fault); raises :class:`LeaseLost` when stopping meanwhile, and
        :class:`TaskFailed` when the store refuses the call (a topic of another namespace, a
        record it cannot take): a refusal is the same on every try, so retrying it would
        leave the task ``running`` for ever, doing nothing."""
        attempt = 0
        while True:
            try:
                return await step(*args)
            except asyncio.CancelledError:
                raise
            except (ConflictError, InvalidArgumentError) as exc:
                # The store names a topic's owner; the connector's namespace must not learn it.
                reason = re.sub(r"namespace '[^']*'", "another namespace", describe(exc))
                raise TaskFailed(f"{what} refused: {reason}") from exc
            except Exception as exc:
                attempt += 1
                log.warning("connector task %s: %s failed (%s); trying again", self.name, what, exc)
                if not await backoff(min(attempt, 6), self.stopping):
                    raise LeaseLost(what) from exc

    def failed_record(self, where: str, exc: BaseException) -> None:
        """A record failed for good: with tolerance ``none`` (or for a
        :class:`~cronbus.connectors.api.TaskError`) the task fails saying which."""
        if self.tolerance is Tolerance.NONE or isinstance(exc, TaskError):
            raise TaskFailed(f"{where}: {describe(exc)}")

    @abc.abstractmethod
    async def run(self) -> None:
        """The task's loop, until stopped."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the plugin's task (errors are logged, never raised)."""
