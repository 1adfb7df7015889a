"""Handles: what ``defer`` returns, a window onto one run in the store."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from .errors import RunTimeoutError
from .model import JSON, ErrorInfo, Run
from .states import RunState

if TYPE_CHECKING:
    from .app import App

_FIRST_POLL = 0.002
_MAX_POLL = 0.05


class RunHandle:
    """A deferred run. Its properties read the store each time, so they are always current."""

    __slots__ = ("_app", "created", "id")

    def __init__(self, app: App, run_id: int, *, created: bool = True) -> None:
        self._app = app
        self.id = run_id
        self.created = created
        """False when an idempotency key matched a run that already existed."""

    def __repr__(self) -> str:
        return f"<RunHandle id={self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    async def fetch_async(self) -> Run:
        """The run as the store holds it now."""
        return await self._app.store.get_run(self.id)

    def fetch(self) -> Run:
        """The run as the store holds it now (blocking)."""
        return self._app.blocking(self.fetch_async())

    @property
    def state(self) -> RunState:
        """The run's current state."""
        return self.fetch().state

    @property
    def result(self) -> JSON:
        """The value its last attempt returned (``None`` until one succeeds)."""
        return self.fetch().result

    @property
    def error(self) -> ErrorInfo | None:
        """What went wrong in its last attempt, if anything did."""
        return self.fetch().error

    async def cancel_async(self) -> RunState:
        """Cancel the run: ``cancelled`` if it was waiting, ``cancelling`` if it is running."""
        return await self._app.store.cancel(self.id, self._app.clock.now())

    def cancel(self) -> RunState:
        """Cancel the run (blocking)."""
        return self._app.blocking(self.cancel_async())

    async def wait_async(self, timeout: float | None = None) -> Run:
        """Wait until the run ends (succeeded, dead, cancelled or skipped) and return it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = _FIRST_POLL
        while True:
            run = await self.fetch_async()
            if run.state.terminal:
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise RunTimeoutError(
                    f"run {self.id} is still {run.state.value} after {timeout} seconds"
                )
            left = pause if deadline is None else min(pause, deadline - time.monotonic())
            await asyncio.sleep(max(0.0, left))
            pause = min(pause * 2, _MAX_POLL)

    def wait(self, timeout: float | None = None) -> Run:
        """Block until the run ends and return it; :class:`RunTimeoutError` after ``timeout``."""
        return self._app.blocking(self.wait_async(timeout))
