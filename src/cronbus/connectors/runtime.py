"""The connector runtime: the tasks a worker holds by lease, started and stopped to match.

Every worker process (unless started with ``--no-connectors``) runs one
:class:`ConnectorRuntime`. Every ``lease_seconds / 3``, or at once when a connector changes
(the ``CONNECTORS_CHANNEL`` wake-up), it renews its task leases and takes free ones; a task
whose worker died is taken by another once its lease runs out. There is no master: the store's
leases and epochs decide, as for subscriptions' pushers (Trogdor's coordinator, without the
coordinator). A task whose lease is no longer returned (paused, stopped, restarted, deleted,
or taken by another worker after a missed renewal) is stopped here; if it still tried to
write, its epoch would fence it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from ..clock import Clock
from ..errors import ConnectorNotFoundError
from ..store.connector_ports import CONNECTORS_CHANNEL, ConnectorStore
from ..store.ports import EVENTS_CHANNEL, Store, wait_any
from .allow import NOWHERE, Reach
from .api import SinkConnector, SourceConnector
from .calls import describe
from .records import Connector, ConnectorLease
from .registry import ConnectorKinds
from .runner import Setting, TaskRunner
from .sink_runner import SinkRunner
from .source_runner import SourceRunner

log = logging.getLogger("cronbus.connectors")

STORE_RETRY = 2.0
"""Seconds before renewing leases again after the store failed."""


class ConnectorRuntime:
    """Runs the connector tasks this process holds."""

    def __init__(
        self,
        store: Store,
        kinds: ConnectorKinds,
        clock: Clock,
        *,
        holder: str | None = None,
        lease_seconds: float = 15.0,
        max_tasks: int = 100,
        poll_seconds: float = 1.0,
        batch: int = 1000,
        reach: Reach = NOWHERE,
    ) -> None:
        self.store = store
        self.kinds = kinds
        self.reach = reach
        """The files and databases built-in connectors may touch (the app's settings)."""
        self.clock = clock
        self.holder = holder or (
            f"connectors-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.lease_seconds = lease_seconds
        self.max_tasks = max_tasks
        self.setting = Setting(
            store=store, events=store, clock=clock, poll_seconds=poll_seconds, batch=batch
        )
        self.runners: dict[tuple[str, int], TaskRunner] = {}

    @property
    def connectors(self) -> ConnectorStore:
        """The store, in its connector roles."""
        return self.store

    async def run(self, stopping: asyncio.Event) -> None:
        """Hold and run connector tasks until ``stopping`` is set, then give them back."""
        changes = await self.store.listen([CONNECTORS_CHANNEL])
        events = await self.store.listen([EVENTS_CHANNEL])
        loop = asyncio.get_running_loop()
        balance_at = loop.time()
        try:
            while not stopping.is_set():
                if loop.time() >= balance_at:
                    balance_at = loop.time() + self.lease_seconds / 3
                    try:
                        await self.balance()
                    except Exception:
                        log.exception("renewing connector task leases failed; trying again")
                        balance_at = loop.time() + STORE_RETRY
                woken = await wait_any((changes, events), stopping, balance_at - loop.time())
                if events in woken:
                    for runner in self.runners.values():
                        runner.wake()
                if changes in woken:
                    balance_at = loop.time()
        finally:
            await self.stop_all()
            await changes.close()
            await events.close()

    async def balance(self) -> None:
        """Renew leases, take free tasks, and start or stop runners to match."""
        leases = await self.connectors.acquire_connector_tasks(
            self.holder, self.clock.now(), self.lease_seconds, self.max_tasks
        )
        held = {(lease.connector, lease.task): lease for lease in leases}
        ended = [
            self.runners.pop(key)
            for key, runner in list(self.runners.items())
            if key not in held or not runner.running or runner.lease.epoch != held[key].epoch
        ]
        # Together: one slow plugin's stop must not hold back the others (nor the next renewal).
        await asyncio.gather(*(runner.stop() for runner in ended))
        for key, lease in held.items():
            runner = self.runners.get(key)
            if runner is not None:
                runner.lease = lease
                continue
            started = await self._start(lease)
            if started is not None:
                self.runners[key] = started

    async def _start(self, lease: ConnectorLease) -> TaskRunner | None:
        """A runner for a newly held task (None: the task failed to start, recorded so)."""
        try:
            connector = await self.connectors.get_connector(lease.connector)
        except ConnectorNotFoundError:
            return None  # deleted since the lease was taken: nothing to run
        try:
            runner = self._runner(lease, connector)
        except Exception as exc:
            reason = f"cannot start: {describe(exc)}"
            log.error("connector task %s#%d %s", connector.name, lease.task, reason)
            await self.connectors.fail_connector_task(lease, reason, self.clock.now())
            return None
        runner.start()
        return runner

    def _runner(self, lease: ConnectorLease, connector: Connector) -> TaskRunner:
        plugin = self.kinds.get(connector.spec.kind, self.reach)
        task = connector.tasks[lease.task]
        if isinstance(plugin, SourceConnector):
            return SourceRunner(self.setting, lease, connector, task, plugin)
        if isinstance(plugin, SinkConnector):
            return SinkRunner(self.setting, lease, connector, task, plugin)
        raise TypeError(f"{type(plugin).__name__} is neither a source nor a sink connector")

    async def stop_all(self) -> None:
        """Stop every runner and give their tasks back, so other workers take them at once."""
        runners = list(self.runners.values())
        self.runners.clear()
        await asyncio.gather(*(r.stop() for r in runners))
        leases = [r.lease for r in runners]
        if leases:
            with contextlib.suppress(Exception):
                await self.connectors.release_connector_tasks(leases, self.clock.now())
