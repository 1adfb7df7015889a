"""The dispatcher's pacing: token-bucket rate limits, the circuit breaker, retry delays."""

from __future__ import annotations

import email.utils

from hypothesis import given
from hypothesis import strategies as st

from cronbus.events.pacing import Breaker, Circuit, RateLimit, retry_after, retry_delay
from cronbus.events.records import DeliveryPolicy


def test_no_rate_limit_grants_everything() -> None:
    limit = RateLimit(None)
    assert limit.grant(0.0, 1000) == 1000
    assert limit.delay(0.0) == 0.0


def test_a_rate_limit_grants_a_burst_then_one_token_per_interval() -> None:
    limit = RateLimit(10.0, burst=5)
    assert limit.grant(100.0, 8) == 5
    assert limit.grant(100.0, 1) == 0
    assert abs(limit.delay(100.0) - 0.1) < 1e-9
    assert limit.grant(100.25, 5) == 2  # 0.25 s at 10/s
    limit.refund(2)
    assert limit.grant(100.25, 5) == 2


@given(st.lists(st.floats(min_value=0.0, max_value=0.5), min_size=1, max_size=200))
def test_a_rate_limit_never_grants_more_than_rate_times_time_plus_burst(gaps: list[float]) -> None:
    limit = RateLimit(20.0, burst=4)
    now, granted = 0.0, 0
    for gap in gaps:
        now += gap
        granted += limit.grant(now, 3)
    assert granted <= 4 + 20.0 * now + 1e-6


def test_a_late_push_earns_no_tokens_for_the_time_it_waited() -> None:
    limit = RateLimit(10.0, burst=5)
    assert limit.grant(100.0, 5) == 5
    limit.sent(100.7)  # the burst only went out 0.7 s after its grant (a busy machine)
    assert limit.grant(100.7, 5) == 0  # without sent(), 7 tokens would be there already
    assert limit.grant(100.85, 5) == 1
    limit.sent(100.5)  # an earlier start never gives time back
    assert limit.grant(100.85, 5) == 0


@given(
    st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=0.5), st.floats(min_value=0.0, max_value=1.0)),
        min_size=1,
        max_size=200,
    )
)
def test_pushes_never_start_faster_than_rate_times_time_plus_burst(
    steps: list[tuple[float, float]],
) -> None:
    limit = RateLimit(20.0, burst=4)
    now, starts = 0.0, []
    for gap, late in steps:
        now += gap
        for _ in range(limit.grant(now, 3)):
            starts.append(now + late)  # each push starts some time after its grant
            limit.sent(now + late)
    starts.sort()
    for i, first in enumerate(starts):
        # In any window from a start, at most burst + rate * window starts.
        within = [s for s in starts[i:] if s - first <= 1.0]
        assert len(within) <= 4 + 20.0 * 1.0 + 1


def test_the_breaker_opens_after_consecutive_failures_and_probes() -> None:
    breaker = Breaker(failures=3, probe=5.0)
    assert breaker.allowed(0.0, in_flight=0) == -1
    breaker.failed(1.0)
    breaker.succeeded()  # a success resets the streak
    for at in (2.0, 3.0, 4.0):
        breaker.failed(at)
    assert breaker.state is Circuit.OPEN
    assert breaker.allowed(5.0, in_flight=0) == 0  # not before the probe time
    assert breaker.next_probe() == 9.0
    assert breaker.allowed(9.0, in_flight=0) == 1
    breaker.started(9.0)
    assert breaker.state is Circuit.PROBING
    assert breaker.allowed(9.5, in_flight=1) == 0  # one probe at a time
    breaker.failed(10.0)  # the probe failed: open again, next probe later
    assert breaker.state is Circuit.OPEN
    assert breaker.allowed(14.9, in_flight=0) == 0  # probes are spaced from the failure
    assert breaker.allowed(15.0, in_flight=0) == 1
    breaker.started(15.0)
    breaker.succeeded()
    assert breaker.state is Circuit.CLOSED
    assert breaker.allowed(15.1, in_flight=0) == -1


def test_retry_delays_grow_are_capped_and_jitter_only_shortens() -> None:
    policy = DeliveryPolicy(backoff=1.0, max_backoff=10.0)
    assert [retry_delay(policy, n, 0.0) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert retry_delay(policy, 3, 0.999) > 2.0
    assert retry_delay(policy, 3, 0.999) < 4.0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("7", 0.0) == 7.0
    assert retry_after(" 2.5 ", 0.0) == 2.5
    assert retry_after("-3", 0.0) == 0.0
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after(date, now) == 30.0
    assert retry_after("soon", now) is None
    assert retry_after(None, now) is None
    assert retry_after("inf", now) is None
