"""Handles: what ``defer`` returns, a window onto one run in the store.

``wait()`` returns the run when it succeeded (or was skipped by a job's policy) and raises
:class:`RunEndedError` (a :class:`~cronbus.errors.RunFailedError`) when it ended ``dead`` or
``cancelled``, so ``handle.wait(10).result`` never hides a failure; ``wait(raise_error=False)``
returns the run whatever its end.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .distribution.fanout import summary
from .errors import RunFailedError, RunTimeoutError
from .model import JSON, ErrorInfo, Run
from .states import RunState
from .waiters import waiters

if TYPE_CHECKING:
    from .app import App
    from .services.runs import RunsService

_FAILED = frozenset({RunState.DEAD, RunState.CANCELLED})
"""The ends that ``wait`` reports by raising."""
_MESSAGE_WIDTH = 200


class RunEndedError(RunFailedError):
    """A run ended ``dead`` or ``cancelled``; what its last attempt raised is kept here.

    ``str()`` is one line (``run 7 of app.send is dead: ConnectionError: down``); the whole
    story is in the attributes: ``run`` (the run as it ended), ``run_id``, ``state``,
    ``error_type`` (None when no attempt failed, e.g. a run cancelled while it waited),
    ``error_message`` and ``traceback`` (empty strings then).
    """

    def __init__(self, run: Run) -> None:
        error = run.error
        self.run = run
        self.run_id = run.id
        self.state = run.state
        self.error_type: str | None = error.type if error else None
        self.error_message = error.message if error else ""
        self.traceback = error.traceback if error else ""
        super().__init__(_one_line(run))
        if self.traceback:
            # A note is printed with the exception's own traceback but kept out of str(), so
            # a test that fails on it shows where the task failed, and logs stay one line.
            self.add_note(
                f"the task's traceback, from its last attempt:\n{self.traceback.rstrip()}"
            )


def _one_line(run: Run) -> str:
    """``run 7 of app.send is dead: ConnectionError: down``, cut to one short line."""
    text = f"run {run.id} of {run.task} is {run.state.value}"
    if run.error is None and run.children is not None:
        return f"{text}: {summary(run.children)}"  # a parent fails by its children
    if run.error is not None:
        lines = run.error.message.strip().splitlines()
        first = lines[0] if lines else ""
        if len(first) > _MESSAGE_WIDTH:
            first = first[: _MESSAGE_WIDTH - 1] + "…"
        text += f": {run.error.type}: {first}" if first else f": {run.error.type}"
    return text


def check_ended(run: Run) -> Run:
    """Return ``run``, or raise :class:`RunEndedError` when it ended dead or cancelled."""
    if run.state in _FAILED:
        raise RunEndedError(run)
    return run


class RunHandle:
    """A deferred run. Its properties read the store each time, so they are always current.

    Reads and changes go through the runs service (:mod:`cronbus.services.runs`), where the
    rules are written once for the Python API, the CLI and the HTTP API (which runs can be
    cancelled or retried, and what a refusal says), in the run's namespace.
    """

    __slots__ = ("_app", "created", "id", "namespace")

    def __init__(
        self, app: App, run_id: int, *, created: bool = True, namespace: str | None = None
    ) -> None:
        self._app = app
        self.id = run_id
        self.created = created
        """False when an idempotency key matched a run that already existed."""
        self.namespace = namespace
        """The run's namespace (None until known: read from the run at first use)."""

    def __repr__(self) -> str:
        return f"<RunHandle id={self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    async def _runs(self) -> RunsService:
        """The runs service of the run's namespace (a job triggered by this app may live in
        another namespace, and its runs with it)."""
        if self.namespace is None:
            self.namespace = (await self._app.store.get_run(self.id)).namespace
        return self._app.services(namespace=self.namespace).runs

    async def fetch_async(self) -> Run:
        """The run as the store holds it now."""
        return await (await self._runs()).get(self.id)

    def fetch(self) -> Run:
        """The run as the store holds it now (blocking)."""
        return self._app.blocking(self.fetch_async())

    @property
    def state(self) -> RunState:
        """The run's current state."""
        return self.fetch().state

    @property
    def result(self) -> JSON:
        """The value its last attempt returned (``None`` until one succeeds); for a map-reduce
        parent its reduce run's result, for a broadcast or shards parent ``None`` (the counts
        are in ``fetch().children``)."""
        return self._app.blocking(self.result_async())

    async def result_async(self) -> JSON:
        """:attr:`result`, from async code (the store shows a fan-out parent's result as
        :func:`cronbus.run_figures.shown_result` says, for every door alike)."""
        return (await self.fetch_async()).result

    @property
    def error(self) -> ErrorInfo | None:
        """What went wrong in its last attempt, if anything did."""
        return self.fetch().error

    async def cancel_async(self) -> RunState:
        """Cancel the run: ``cancelled`` if it was waiting, ``cancelling`` if it is running.

        A run that already ended raises :class:`~cronbus.errors.InvalidTransitionError`."""
        return (await (await self._runs()).cancel(self.id)).state

    def cancel(self) -> RunState:
        """Cancel the run (blocking)."""
        return self._app.blocking(self.cancel_async())

    async def retry_async(self) -> RunState:
        """Queue a dead or cancelled run again, with a fresh retry budget (``queued``); a run
        in another state raises :class:`~cronbus.errors.ConflictError`."""
        return (await (await self._runs()).retry(self.id)).state

    def retry(self) -> RunState:
        """Retry the run (blocking)."""
        return self._app.blocking(self.retry_async())

    async def wait_async(self, timeout: float | None = None, *, raise_error: bool = True) -> Run:
        """Wait until the run ends (succeeded, dead, cancelled or skipped) and return it.

        A fan-out parent ends when its children have (it is ``waiting`` meanwhile); its
        ``result`` is then as :attr:`result` says. A run that ended ``dead`` or ``cancelled``
        raises :class:`RunEndedError` (a :class:`~cronbus.errors.RunFailedError` with the
        error type, message and traceback of its last attempt), unless ``raise_error`` is
        false. :class:`RunTimeoutError` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        ended = waiters(self._app.store)
        run = await self.fetch_async()
        while True:
            if run.state.terminal:
                return check_ended(run) if raise_error else run
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise RunTimeoutError(
                    f"run {self.id} is still {run.state.value} after {timeout} seconds"
                )
            # Woken when the run ends (its completion nudges the "ended" channel), with the run
            # as read then; at the deadline (or when it could not be read), read it again.
            woken = await ended.until_ended(self.id, left)
            if woken is None:
                run = await self.fetch_async()
            else:
                run = (await self._runs()).shown(woken)

    def wait(self, timeout: float | None = None, *, raise_error: bool = True) -> Run:
        """Block until the run ends and return it (see :meth:`wait_async`).

        Raises :class:`RunEndedError` for a dead or cancelled run unless ``raise_error`` is
        false, and :class:`RunTimeoutError` after ``timeout`` seconds.
        """
        return self._app.blocking(self.wait_async(timeout, raise_error=raise_error))
