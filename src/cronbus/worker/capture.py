"""Capturing what an attempt prints and logs, into a bounded buffer kept with the attempt.

The attempt running in a context (a thread, an asyncio task) is named by :data:`CURRENT_LOG`,
set with :func:`capturing`. :func:`install` routes ``sys.stdout`` and the root logger there:

* ``print()`` goes to the current attempt's :class:`AttemptLog`, and to the original
  ``sys.stdout`` when no attempt is current;
* log records reaching the root logger are appended to the current attempt's log as
  ``LEVEL logger.name: message`` (they still reach the worker's own handlers too). The handler
  has level NOTSET and the root logger's level is left alone: whether a record is emitted is
  decided by the task's logger level, as anywhere else (the root logger defaults to WARNING, so
  a task that wants its INFO records calls ``logging.getLogger(__name__).setLevel("INFO")``).
  Records of cronbus's own loggers (``cronbus`` and ``cronbus.*``) are not captured.

Context variables are copied into ``asyncio`` tasks, ``asyncio.to_thread`` and
``loop.run_in_executor(pool, context.run, fn)``, so the output of an attempt lands in its own log
even when several run at once. Not captured: threads the task starts itself (a new thread starts
with an empty context), writes to ``sys.stdout.buffer`` or to file descriptor 1, and stderr.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any, TextIO, cast

__all__ = [
    "CURRENT_LOG",
    "DEFAULT_LIMIT",
    "AttemptLog",
    "capturing",
    "current_log",
    "install",
    "render_log",
    "uninstall",
]

DEFAULT_LIMIT = 64 * 1024
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def render_log(kept: str, dropped: int) -> str:
    """Return ``kept``, followed when ``dropped`` bytes were dropped by the truncation marker."""
    if not dropped:
        return kept
    newline = "\n" if kept and not kept.endswith("\n") else ""
    return f"{kept}{newline}…[truncated: {dropped} more bytes]"


class AttemptLog:
    """A thread-safe text buffer that keeps the first ``limit`` bytes (UTF-8) written to it.

    The head is kept and the tail dropped, because the beginning of a failure is what people
    need; the dropped bytes are counted and reported by a marker line at the end of
    :meth:`getvalue` (which may therefore exceed ``limit`` by the marker's length).
    """

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 0:
            raise ValueError(f"limit must be 0 or more bytes, got {limit}")
        self._limit = limit
        self._kept = bytearray()
        self._dropped = 0
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        """How many bytes of text are kept at most."""
        return self._limit

    @property
    def kept_bytes(self) -> int:
        """How many bytes are kept so far."""
        return len(self._kept)

    @property
    def dropped_bytes(self) -> int:
        """How many bytes were dropped so far."""
        return self._dropped

    def write(self, text: str) -> int:
        """Append ``text`` (or the part of it that fits); return ``len(text)`` like a stream."""
        # backslashreplace: a lone surrogate in a print() must not fail the task.
        data = text.encode("utf-8", "backslashreplace")
        with self._lock:
            kept = self._admit(data)
            self._kept += kept
            self._dropped += len(data) - len(kept)
            self._appended(kept)
        return len(text)

    def _admit(self, data: bytes) -> bytes:
        room = self._limit - len(self._kept)
        if self._dropped or room <= 0:
            return b""  # once something was dropped, nothing after it is kept: one clean head
        if len(data) <= room:
            return data
        # Cut at a character boundary: drop the incomplete UTF-8 sequence at the cut.
        return data[:room].decode("utf-8", "ignore").encode("utf-8")

    def _appended(self, data: bytes) -> None:
        """Called under the lock after each write with the bytes kept from it (maybe none).

        A hook for subclasses that mirror the buffer elsewhere (the process isolation keeps a
        copy in shared memory, so a killed child's output survives it).
        """

    def getvalue(self) -> str:
        """Return the kept text, ending with a truncation marker line if anything was dropped."""
        if not self._kept and not self._dropped:
            return ""  # nothing written (most attempts): no lock, no copy
        with self._lock:
            kept, dropped = bytes(self._kept), self._dropped
        return render_log(kept.decode("utf-8", "replace"), dropped)

    def __repr__(self) -> str:
        return f"<AttemptLog {len(self._kept)}/{self._limit} bytes, {self._dropped} dropped>"


CURRENT_LOG: ContextVar[AttemptLog | None] = ContextVar("cronbus.attempt_log", default=None)
"""The log of the attempt running in this context (thread or asyncio task), if any."""


def current_log() -> AttemptLog | None:
    """Return the log of the attempt running in this context, or None."""
    return CURRENT_LOG.get()


@contextlib.contextmanager
def capturing(log: AttemptLog) -> Iterator[AttemptLog]:
    """Send this context's output to ``log`` until the block ends (needs :func:`install`)."""
    token = CURRENT_LOG.set(log)
    try:
        yield log
    finally:
        CURRENT_LOG.reset(token)


class _StdoutProxy:
    """Stands in for ``sys.stdout``: writes go to the current attempt's log, else to the original.

    Not an ``io.TextIOBase``: attributes it does not define (``buffer``, ``encoding``, ``mode``…)
    are those of the original stream, so code that inspects ``sys.stdout`` sees the real one.
    """

    def __init__(self, original: TextIO) -> None:
        self._original = original

    def write(self, text: str) -> int:
        log = CURRENT_LOG.get()
        if log is None:
            return self._original.write(text)
        return log.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if CURRENT_LOG.get() is None:
            self._original.flush()

    def isatty(self) -> bool:
        return CURRENT_LOG.get() is None and self._original.isatty()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def __repr__(self) -> str:
        return f"<cronbus stdout capture of {self._original!r}>"


class _AttemptLogHandler(logging.Handler):
    """Appends records to the current attempt's log; level NOTSET, so loggers decide."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter(LOG_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        log = CURRENT_LOG.get()
        if log is None or _is_cronbus(record.name):
            return
        try:
            log.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def _is_cronbus(name: str) -> bool:
    # The worker's own records describe the attempt; they belong to the worker's log, and
    # capturing them would also echo the attempt's log back into itself.
    return name == "cronbus" or name.startswith("cronbus.")


class _Installation:
    """What :func:`install` changed, so the last :func:`uninstall` can undo exactly that."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.original: TextIO | None = None
        self.proxy: _StdoutProxy | None = None
        self.handler: _AttemptLogHandler | None = None


# sys.stdout and the root logger are process-wide, so this state is too (the one module-level
# singleton here, mirroring the globals it patches).
_installation = _Installation()


def install() -> None:
    """Route ``sys.stdout`` and root-logger records to the current attempt's log.

    Reference counted: each call needs one :func:`uninstall`, and only the last one undoes it.
    """
    state = _installation
    with state.lock:
        state.count += 1
        if state.count > 1:
            return
        state.original = sys.stdout
        state.proxy = _StdoutProxy(sys.stdout)
        # A typed stand-in: the proxy is a text stream in every way print() and logging use.
        sys.stdout = cast(TextIO, state.proxy)
        state.handler = _AttemptLogHandler()
        logging.getLogger().addHandler(state.handler)


def uninstall() -> None:
    """Undo one :func:`install`; the last one restores ``sys.stdout`` and the root logger.

    Calling it more often than :func:`install` does nothing. If something replaced
    ``sys.stdout`` after :func:`install`, that replacement is left in place.
    """
    state = _installation
    with state.lock:
        if state.count == 0:
            return
        state.count -= 1
        if state.count > 0:
            return
        if sys.stdout is cast(object, state.proxy):
            sys.stdout = cast(TextIO, state.original)
        if state.handler is not None:
            logging.getLogger().removeHandler(state.handler)
        state.original = state.proxy = state.handler = None
