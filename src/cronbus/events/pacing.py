"""How fast a subscription may push: a rate limit, a circuit breaker and retry delays.

All three are pure: they take ``now`` (and a random number) as arguments, so the dispatcher's
tests can drive them with a fake clock and know the answers.
"""

from __future__ import annotations

import email.utils
import enum
import math

from .records import DeliveryPolicy


class RateLimit:
    """A token bucket: at most ``rate`` pushes per second, in bursts of up to ``burst``.

    Waiting for a token spends no attempt: the delivery has not been pushed yet.
    """

    def __init__(self, rate: float | None, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else max(1.0, rate or 1.0)
        self._tokens = self.burst
        self._at: float | None = None

    def grant(self, now: float, want: int) -> int:
        """Take up to ``want`` tokens; return how many were taken (all of them if unlimited)."""
        if self.rate is None:
            return want
        self._refill(now)
        granted = min(want, int(self._tokens))
        self._tokens -= granted
        return granted

    def sent(self, now: float) -> None:
        """A granted push starts now: tokens accrue again only from here. Time a push spent
        between its grant and its start (a slow store, a busy machine) earns nothing, so the
        pushes after it cannot bunch up behind a late one: the rate holds at the target however
        slow the machine is (it may only come out lower)."""
        if self.rate is not None and (self._at is None or now > self._at):
            self._at = now

    def refund(self, count: int) -> None:
        """Give back tokens granted for pushes that did not happen."""
        if self.rate is not None and count > 0:
            self._tokens = min(self.burst, self._tokens + count)

    def delay(self, now: float) -> float:
        """Seconds until the next token (0.0 if one is there or there is no limit)."""
        if self.rate is None:
            return 0.0
        self._refill(now)
        return max(0.0, (1.0 - self._tokens) / self.rate)

    def _refill(self, now: float) -> None:
        assert self.rate is not None
        if self._at is not None:
            self._tokens = min(self.burst, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now


class Circuit(enum.StrEnum):
    """The state of a target's circuit breaker."""

    CLOSED = "closed"
    """Pushes flow."""
    OPEN = "open"
    """The target keeps failing: only a probe now and then."""
    PROBING = "probing"
    """One push is testing the target; its result closes or re-opens the circuit."""


class Breaker:
    """Opens after ``failures`` consecutive failed pushes; then lets one probe through every
    ``probe`` seconds, and closes by itself when a probe succeeds."""

    def __init__(self, failures: int, probe: float) -> None:
        self.failures = max(1, failures)
        self.probe = probe
        self.state = Circuit.CLOSED
        self._streak = 0
        self._next_probe = 0.0

    def allowed(self, now: float, in_flight: int) -> int:
        """How many pushes may start now: unbounded (-1) when closed, else 0 or 1 probe."""
        if self.state is Circuit.CLOSED:
            return -1
        if self.state is Circuit.OPEN and now >= self._next_probe and in_flight == 0:
            return 1
        return 0

    def started(self, now: float) -> None:
        """A push started; while open, it is the probe."""
        if self.state is Circuit.OPEN:
            self.state = Circuit.PROBING
            self._next_probe = now + self.probe

    def succeeded(self) -> None:
        """A push succeeded: the circuit closes."""
        self._streak = 0
        self.state = Circuit.CLOSED

    def failed(self, now: float) -> None:
        """A push failed: count it, and open (or re-open) the circuit when it is time."""
        self._streak += 1
        if self.state is Circuit.PROBING or self._streak >= self.failures:
            if self.state is not Circuit.OPEN:
                self._next_probe = now + self.probe
            self.state = Circuit.OPEN

    def next_probe(self) -> float | None:
        """When the next probe may start, while the circuit is open."""
        return self._next_probe if self.state is Circuit.OPEN else None


def retry_delay(policy: DeliveryPolicy, attempt: int, rand: float) -> float:
    """Seconds before the next push after attempt ``attempt`` (1-based) failed.

    Exponential from ``policy.backoff``, capped at ``policy.max_backoff``; jitter takes up to
    half off, so deliveries that failed together (a target went down) come back spread out.
    """
    base = min(policy.backoff * 2.0 ** (attempt - 1), policy.max_backoff)
    return base * (1.0 - 0.5 * rand)


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds asked for by a ``Retry-After`` header (seconds or an HTTP date), if readable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
