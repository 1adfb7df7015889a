"""The dispatcher's warnings about failed pushes and dead letters, rate-limited per subscription.

Every failed attempt and every dead letter is worth one WARNING line naming the subscription,
the target (a webhook's host, never its URL: URLs carry credentials and query secrets) and the
status or error. A dead target fails every delivery of its subscription, so each subscription
gets at most ``limit`` lines of each kind per ``window`` seconds; past that, the lines are
counted, and one "suppressed K similar messages" line says how many when the window ends.

Records carry stable fields for log processors: ``action`` (``delivery.failed``,
``delivery.dead``, ``delivery.suppressed``), ``subscription``, ``target``, ``status``, ``error``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

LIMIT = 10
"""Lines of one kind (failed, dead) per subscription per window."""
WINDOW = 60.0
"""Seconds of a rate-limit window."""

FAILED = "delivery.failed"
DEAD = "delivery.dead"
SUPPRESSED = "delivery.suppressed"


@dataclass(slots=True)
class _Window:
    started: float
    written: int = 0
    suppressed: int = 0


class FaultLog:
    """Writes the dispatcher's failure warnings, at most ``limit`` per subscription and kind
    per ``window`` seconds of ``clock`` (monotonic seconds)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        limit: int = LIMIT,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.limit = limit
        self.window = window
        self.clock = clock
        self._windows: dict[tuple[str, str], _Window] = {}

    def failed(
        self,
        subscription: str,
        target: str,
        *,
        attempt: int,
        status: int | None,
        error: str | None,
        then: str,
    ) -> None:
        """One attempt failed; ``then`` says what happens next (``retry in 2.0 s``)."""
        self._write(
            FAILED,
            subscription,
            target,
            status,
            error,
            "subscription %s: attempt %d to %s failed: %s (%s)",
            (subscription, attempt, target, _reason(status, error), then),
        )

    def dead(
        self,
        subscription: str,
        target: str,
        *,
        delivery: int,
        event_id: str,
        attempts: int,
        status: int | None,
        error: str | None,
    ) -> None:
        """A delivery was given up: it is a dead letter now."""
        self._write(
            DEAD,
            subscription,
            target,
            status,
            error,
            "subscription %s: delivery %d (event %s) to %s is a dead letter after %d "
            "attempt(s): %s",
            (subscription, delivery, event_id, target, attempts, _reason(status, error)),
        )

    def flush(self) -> None:
        """Close the windows that ended, writing their "suppressed" lines."""
        now = self.clock()
        for key, window in list(self._windows.items()):
            if now - window.started >= self.window:
                self._close(key, window)
                del self._windows[key]

    def forget(self, subscription: str) -> None:
        """The subscription is no longer pushed here: write what it suppressed, drop it."""
        for key in [k for k in self._windows if k[1] == subscription]:
            self._close(key, self._windows.pop(key))

    def _write(
        self,
        action: str,
        subscription: str,
        target: str,
        status: int | None,
        error: str | None,
        message: str,
        args: tuple[object, ...],
    ) -> None:
        key = (action, subscription)
        now = self.clock()
        window = self._windows.get(key)
        if window is not None and now - window.started >= self.window:
            self._close(key, window)
            window = None
        if window is None:
            window = self._windows[key] = _Window(started=now)
        if window.written >= self.limit:
            window.suppressed += 1
            return
        window.written += 1
        extra = {
            "action": action,
            "subscription": subscription,
            "target": target,
            "status": status,
            "error": error,
        }
        self.logger.warning(message, *args, extra=extra)

    def _close(self, key: tuple[str, str], window: _Window) -> None:
        if not window.suppressed:
            return
        action, subscription = key
        kind = "failed attempts" if action == FAILED else "dead letters"
        self.logger.warning(
            "subscription %s: suppressed %d similar messages (%s) in %.0f s",
            subscription,
            window.suppressed,
            kind,
            self.window,
            extra={
                "action": SUPPRESSED,
                "subscription": subscription,
                "suppressed": window.suppressed,
                "kind": action,
            },
        )


def _reason(status: int | None, error: str | None) -> str:
    if error:
        return error
    return f"HTTP {status}" if status is not None else "failed"
