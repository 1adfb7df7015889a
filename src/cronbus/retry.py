"""A task's retry policy: how many attempts a run gets and how long it waits between them.

:class:`Retry` is a pure value: it never reads the clock or a random source. The worker passes
``now`` and ``rand`` in, so a test can ask "when is the third attempt?" and get one answer.

The delay before attempt ``n + 1``, after attempt ``n`` failed, is::

    base  = min(backoff * factor ** (n - 1), max_backoff)
    delay = base * (1 - jitter * rand)          # rand in [0, 1)

Jitter only ever shortens a delay, so ``max_backoff`` stays a true upper bound, and the lower
bound is ``base * (1 - jitter)``. Spreading the retries of runs that failed together (a target
went down for all of them at once) keeps them from coming back as one thundering herd.
"""

from __future__ import annotations

import dataclasses
import math

from .errors import Abort, ConfigurationError

ExceptionTypes = tuple[type[BaseException], ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Retry:
    """How a run is retried after a failed attempt.

    ``retries`` counts the attempts after the first, so a run gets ``retries + 1`` attempts in all.
    An exception is retried when it is an instance of ``retry_on`` and of neither
    ``dont_retry_on`` nor :class:`cronbus.errors.Abort`. A timed-out attempt is reported as a
    :class:`TimeoutError` and follows the same rule.
    """

    retries: int = 0
    backoff: float = 1.0
    factor: float = 2.0
    max_backoff: float = 300.0
    jitter: float = 0.5
    retry_on: ExceptionTypes = (Exception,)
    dont_retry_on: ExceptionTypes = ()

    def __post_init__(self) -> None:
        """Refuse a policy that cannot be followed, naming the field and the value."""
        _check_count("retries", self.retries)
        _check_number("backoff", self.backoff, low=0.0)
        _check_number("factor", self.factor, low=1.0)
        # An infinite cap is a readable way to say "no cap".
        _check_number("max_backoff", self.max_backoff, low=0.0, finite=False)
        _check_number("jitter", self.jitter, low=0.0, high=1.0)
        _check_exception_types("retry_on", self.retry_on)
        _check_exception_types("dont_retry_on", self.dont_retry_on)

    @classmethod
    def coerce(cls, value: Retry | int | None) -> Retry:
        """Accept the spellings a task decorator takes: a policy, a number of retries, or None.

        ``None`` means no retries; an ``int`` keeps every other field at its default.
        """
        if isinstance(value, Retry):
            return value
        if value is None:
            return cls()
        # bool is an int, but ``retries=True`` is almost certainly a mistake, not "one retry".
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(retries=value)
        raise ConfigurationError(
            f"retries must be a Retry, an int or None, not {type(value).__name__} {value!r}"
        )

    @property
    def max_attempts(self) -> int:
        """The number of attempts a run gets in all: the first one plus the retries."""
        return self.retries + 1

    def delay(self, attempt: int, rand: float) -> float:
        """Seconds to wait before attempt ``attempt + 1``, once attempt ``attempt`` failed.

        ``attempt`` is 1-based; ``rand`` is a number in [0, 1) (``random.random()``), injected so
        the result is deterministic.
        """
        _check_attempt(attempt)
        if not 0.0 <= rand < 1.0:
            raise ValueError(f"rand must be in [0, 1), got {rand!r}")
        return self._capped(attempt) * (1.0 - self.jitter * rand)

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """Whether a run whose attempt ``attempt`` (1-based) raised ``exc`` gets another one."""
        _check_attempt(attempt)
        if attempt >= self.max_attempts:
            return False
        if isinstance(exc, (Abort, *self.dont_retry_on)):
            return False
        return isinstance(exc, self.retry_on)

    def next_eta(self, exc: BaseException, attempt: int, now: float, rand: float) -> float | None:
        """When the next attempt is due (epoch seconds), or None when the run should give up."""
        if not self.should_retry(exc, attempt):
            return None
        return now + self.delay(attempt, rand)

    def _capped(self, attempt: int) -> float:
        """The exponential delay for ``attempt``, capped by ``max_backoff``, before jitter."""
        if self.backoff == 0.0:
            # Checked first so that 0 * inf (a huge exponent) cannot turn into NaN.
            return 0.0
        try:
            raw = self.backoff * self.factor ** (attempt - 1)
        except OverflowError:
            # A run can fail thousands of times; a float power that large raises rather than
            # returning inf, and any such delay is past the cap anyway.
            return self.max_backoff
        return min(raw, self.max_backoff)


def _check_count(field: str, value: object) -> None:
    """Require a non-negative int (not a bool) for ``field``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigurationError(f"Retry.{field} must be an int, got {value!r}")
    if value < 0:
        raise ConfigurationError(f"Retry.{field} must be >= 0, got {value!r}")


def _check_number(
    field: str, value: object, *, low: float, high: float | None = None, finite: bool = True
) -> None:
    """Require a real number in [low, high] for ``field``; infinity only when not ``finite``."""
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        raise ConfigurationError(f"Retry.{field} must be a number, got {value!r}")
    if finite and math.isinf(value):
        raise ConfigurationError(f"Retry.{field} must be finite, got {value!r}")
    if value < low:
        raise ConfigurationError(f"Retry.{field} must be >= {low:g}, got {value!r}")
    if high is not None and value > high:
        raise ConfigurationError(f"Retry.{field} must be <= {high:g}, got {value!r}")


def _check_exception_types(field: str, value: object) -> None:
    """Require a tuple of exception classes, since ``isinstance`` takes nothing else."""
    if not isinstance(value, tuple) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        raise ConfigurationError(
            f"Retry.{field} must be a tuple of exception classes, got {value!r}"
        )


def _check_attempt(attempt: int) -> None:
    """Attempts are numbered from 1; anything else is a bug in the caller."""
    if attempt < 1:
        raise ValueError(f"attempt numbers start at 1, got {attempt!r}")
