"""Stopping a running attempt: a cooperative cancel token, and a forced exception in a thread.

A task learns that its attempt timed out or was cancelled in one of two ways:

* cooperatively, by asking its :class:`CancelToken` (``current_token().raise_if_cancelled()``, or
  ``current_token().wait(5)`` instead of ``time.sleep(5)``): this works wherever the task is,
  including inside a blocking wait;
* by force, with :func:`interrupt_thread`, which raises :class:`Interrupted` in the task's thread
  the next time that thread runs Python bytecode.

Neither can stop a thread blocked in C code that never returns; that is why the worker bounds the
number of threads it abandons, and why tasks that must be killable run in a child process
(:mod:`cronbus.worker.isolation`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar

__all__ = [
    "CURRENT_TOKEN",
    "CancelToken",
    "Interrupted",
    "current_token",
    "interrupt_thread",
    "using_token",
]

logger = logging.getLogger(__name__)


class Interrupted(Exception):
    """Raised inside a task whose attempt timed out or was cancelled."""

    def __init__(self, reason: str = "interrupted") -> None:
        # A default reason, because PyThreadState_SetAsyncExc instantiates the class without
        # arguments.
        super().__init__(reason)
        self.reason = reason


class CancelToken:
    """Tells a running attempt that it should stop, and why; safe to use from any thread.

    Cancelling is one-way and happens at most once: the first reason is kept.
    """

    __slots__ = ("_callbacks", "_event", "_lock", "_reason")

    def __init__(self) -> None:
        # The event is made by the first wait: most attempts never wait on their token, and an
        # Event (a Condition and two locks) cost more than the rest of the token.
        self._event: threading.Event | None = None
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._callbacks: list[Callable[[str], object]] = []

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """Why the attempt was cancelled (``"timeout"``, ``"cancelled"``…), or None."""
        return self._reason

    def cancel(self, reason: str) -> None:
        """Cancel with ``reason``; wakes every waiter and runs every callback (once)."""
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            callbacks, self._callbacks = self._callbacks, []
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks:
            _run_callback(callback, reason)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` seconds passed; True when cancelled."""
        with self._lock:
            if self._reason is not None:
                return True
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        return event.wait(timeout)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Interrupted` with the reason when the token was cancelled."""
        reason = self._reason
        if reason is not None:
            raise Interrupted(reason)

    def on_cancel(self, callback: Callable[[str], object]) -> Callable[[], None]:
        """Call ``callback(reason)`` when cancelled, at once if already; return a remover.

        The callback runs in the thread that cancels, so it must be quick and thread-safe (for
        an event loop: ``loop.call_soon_threadsafe``).
        """
        with self._lock:
            reason = self._reason
            if reason is None:
                self._callbacks.append(callback)
        if reason is not None:
            _run_callback(callback, reason)
            return _nothing

        def remove() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    def __repr__(self) -> str:
        state = f"cancelled: {self._reason}" if self._reason is not None else "active"
        return f"<CancelToken {state}>"


def _run_callback(callback: Callable[[str], object], reason: str) -> None:
    # One failing callback must not keep the others (or the canceller) from running.
    try:
        callback(reason)
    except Exception:
        logger.exception("a cancel callback failed", extra={"action": "cancel_callback_failed"})


def _nothing() -> None:
    return None


CURRENT_TOKEN: ContextVar[CancelToken | None] = ContextVar("cronbus.cancel_token", default=None)
"""The cancel token of the attempt running in this context (thread or asyncio task)."""


def current_token() -> CancelToken:
    """Return the running attempt's cancel token, or a token never cancelled outside attempts.

    Outside an attempt each call returns a fresh token, so cancelling it affects nothing.
    """
    token = CURRENT_TOKEN.get()
    return CancelToken() if token is None else token


@contextlib.contextmanager
def using_token(token: CancelToken) -> Iterator[CancelToken]:
    """Make ``token`` the current one in this context until the block ends."""
    reset = CURRENT_TOKEN.set(token)
    try:
        yield token
    finally:
        CURRENT_TOKEN.reset(reset)


# A private prototype rather than ctypes.pythonapi.PyThreadState_SetAsyncExc with argtypes set,
# which would change a function object that other libraries share. PYFUNCTYPE keeps the GIL held
# during the call, as the C API requires.
_set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)


def interrupt_thread(thread_id: int, exc_type: type[BaseException]) -> bool:
    """Raise ``exc_type`` in the thread ``thread_id`` (a ``threading.get_ident()``); True if set.

    The exception is only *scheduled*: CPython raises it when that thread next runs Python
    bytecode. A thread blocked in C (``time.sleep``, a socket read, a lock, a C extension) sees
    it only when the call returns, possibly never. That is why tasks also get a
    :class:`CancelToken` they can wait on, and why the worker bounds how many such threads it
    abandons.

    The caller must make sure the thread still runs the attempt it means to stop: an exception
    scheduled just after the attempt ended is raised in whatever the thread runs next.
    """
    if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
        raise TypeError(f"exc_type must be an exception class, got {exc_type!r}")
    count = _set_async_exc(thread_id, exc_type)
    if count == 0:
        return False  # no thread with that id (it ended)
    if count > 1:
        # The C API says this cannot happen, and that it must be undone if it does: passing
        # NULL clears what was just scheduled in every thread it reached.
        _set_async_exc(thread_id, ctypes.py_object())
        return False
    return True
