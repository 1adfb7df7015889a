"""Workers: list them with the runs they hold, show one, ask one to drain, prune old rows, and
name the tasks whose queued runs no live worker knows.

A worker's state is what the registry says (``alive``, ``draining``, ``stopped``), except that
one silent for longer than its own registered lease is ``lost`` (:mod:`cronbus.liveness`: the
reader's ``CRONBUS_LEASE_SECONDS`` plays no part). Stopped workers
are history, not the cluster: ``list`` leaves them out unless asked.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from ..errors import ConflictError, InvalidArgumentError, WorkerNotFoundError
from ..liveness import is_live
from ..model import Run, WorkerInfo, WorkerState
from ..states import ACTIVE
from ..store import CONTROL_CHANNEL
from ..validation import check_seconds, check_text, shorten
from .access import Scope
from .context import Context, naming
from .redaction import Redactor
from .views import WorkerView

PRUNE_AFTER = 86_400.0
"""Seconds of silence after which ``prune`` deletes a worker's row by default."""


def check_worker_states(
    states: Sequence[WorkerState | str], field: str = "states"
) -> tuple[WorkerState, ...]:
    """Worker states by name (``alive``, ``draining``, ``lost``, ``stopped``)."""
    if isinstance(states, str):
        states = [states]
    chosen = []
    for state in states:
        try:
            chosen.append(WorkerState(state))
        except ValueError:
            allowed = ", ".join(s.value for s in WorkerState)
            raise InvalidArgumentError(
                f"{field} must be worker states ({allowed}), got {shorten(state)}", field=field
            ) from None
    return tuple(dict.fromkeys(chosen))


class WorkersService:
    """Workers of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def list(
        self, states: Sequence[WorkerState | str] = (), include_stopped: bool = False
    ) -> builtins.list[WorkerView]:
        """Workers of the namespace, newest first, with the runs each holds; stopped ones
        only with ``include_stopped`` or when ``states`` asks for them."""
        self._c.read()
        wanted = check_worker_states(states)
        seen = await self._read()
        if wanted:
            return [view for view in seen if view.worker.state in wanted]
        if include_stopped:
            return seen
        return [view for view in seen if view.worker.state is not WorkerState.STOPPED]

    async def get(self, worker_id: str) -> WorkerView:
        """One worker of the namespace (stopped ones too) with every run it holds."""
        self._c.read()
        return await self._get(worker_id)

    async def _get(self, worker_id: str) -> WorkerView:
        with naming("worker_id"):
            check_text(worker_id, "worker_id", max_length=200, spaces=False)
        found = [view for view in await self._read() if view.worker.id == worker_id]
        if not found:
            raise WorkerNotFoundError(f"no worker has id {worker_id!r}")
        return found[0]

    async def drain(self, worker_id: str) -> WorkerView:
        """Ask a worker to drain: at once (it is woken) it stops claiming, finishes what it
        holds and stops, as on SIGTERM. A worker that stopped or was lost is a conflict."""
        self._c.write()
        view = await self._get(worker_id)
        if view.worker.state in (WorkerState.STOPPED, WorkerState.LOST):
            raise ConflictError(
                f"worker {worker_id!r} is {view.worker.state.value}: there is nothing to drain"
            )
        await self._c.store.request_drain(view.worker.id, self._c.now())
        # Wake the workers' heartbeat loops so the drain starts now, not a heartbeat later.
        await self._c.store.notify([CONTROL_CHANNEL])
        await self._c.audit("workers.drain", view.worker.id)
        return await self._get(worker_id)

    async def prune(self, older_than: float = PRUNE_AFTER) -> builtins.list[str]:
        """Delete the registry rows of workers silent for longer than ``older_than`` seconds
        and holding no run; return their ids. The registry is shared by every namespace, so
        this needs write access to all of them."""
        self._c.access.require(Scope.WRITE, None)
        with naming("older_than"):
            seconds = check_seconds(older_than, "older_than")
        removed = await self._c.store.prune_workers(self._c.now() - seconds)
        if removed:
            await self._c.audit("workers.prune", "workers", {"removed": removed}, namespace=None)
        return removed

    async def _read(self) -> builtins.list[WorkerView]:
        """The namespace's workers with the runs each holds, in two store calls."""
        now = self._c.now()
        found = await self._c.store.list_workers(now, namespace=self._c.namespace)
        held = [run_id for worker in found for run_id in worker.running]
        shown = Redactor(self._c).runs(await self._c.store.get_runs(held)) if held else []
        runs = {run.id: run for run in shown}
        return [
            WorkerView(
                worker=worker,
                runs=_held(worker, runs),
                seen_at=now,
                heartbeat_age=round(max(0.0, now - worker.heartbeat_at), 3),
            )
            for worker in found
        ]

    async def unknown_tasks(self) -> builtins.list[str]:
        """Tasks of the namespace's queued runs that no live worker knows, by name: such runs
        wait (never dead-lettered) until a worker whose code registers the task starts, as
        in a rolling deploy."""
        self._c.read()
        return sorted(await self._c.store.unknown_tasks(self._c.now(), self._c.namespace))

    async def live(self) -> builtins.list[WorkerInfo]:
        """The namespace's live workers (alive, heartbeat within their own lease)."""
        self._c.read()
        now = self._c.now()
        return [v.worker for v in await self._read() if is_live(v.worker, now)]


def _held(worker: WorkerInfo, runs: dict[int, Run]) -> list[Run]:
    """The worker's runs that it still holds: one may have ended between the two reads."""
    return [
        run
        for run_id in worker.running
        if (run := runs.get(run_id)) is not None
        and run.state in ACTIVE
        and run.lease_owner == worker.id
    ]
