"""Retry policy: attempts, exponential backoff with a cap and jitter, what is retried."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronbus.errors import Abort, ConfigurationError, CronbusError
from cronbus.retry import Retry

rands = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
attempts = st.integers(min_value=1, max_value=10_000)
policies = st.builds(
    Retry,
    retries=st.integers(0, 50),
    backoff=st.floats(0.0, 1e4),
    factor=st.floats(1.0, 10.0),
    max_backoff=st.floats(0.0, 1e6),
    jitter=st.floats(0.0, 1.0),
)


class Transient(Exception):
    """A failure worth retrying."""


class Permanent(Transient):
    """A subclass the policy excludes."""


# -- shape ----------------------------------------------------------------------------------------


def test_defaults() -> None:
    retry = Retry()
    assert retry.retries == 0
    assert retry.max_attempts == 1
    assert (retry.backoff, retry.factor, retry.max_backoff, retry.jitter) == (1.0, 2.0, 300.0, 0.5)
    assert retry.retry_on == (Exception,)
    assert retry.dont_retry_on == ()


def test_is_frozen() -> None:
    retry = Retry(retries=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        retry.retries = 4  # type: ignore[misc]


def test_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        Retry(3)  # type: ignore[call-arg]


def test_equal_policies_compare_and_hash_equal() -> None:
    assert Retry(retries=2) == Retry(retries=2)
    assert hash(Retry(retries=2)) == hash(Retry(retries=2))


@pytest.mark.parametrize("retries", [0, 1, 5, 100])
def test_max_attempts_is_retries_plus_one(retries: int) -> None:
    assert Retry(retries=retries).max_attempts == retries + 1


# -- delays ---------------------------------------------------------------------------------------


def test_delays_grow_exponentially() -> None:
    retry = Retry(retries=10, backoff=1.0, factor=2.0, max_backoff=1e9, jitter=0.0)
    assert [retry.delay(n, 0.0) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def test_delays_with_other_base_and_factor() -> None:
    retry = Retry(backoff=0.5, factor=3.0, jitter=0.0)
    assert [retry.delay(n, 0.0) for n in range(1, 5)] == [0.5, 1.5, 4.5, 13.5]


def test_factor_one_is_a_constant_delay() -> None:
    retry = Retry(backoff=7.0, factor=1.0, jitter=0.0)
    assert {retry.delay(n, 0.0) for n in range(1, 50)} == {7.0}


def test_delays_are_capped() -> None:
    retry = Retry(backoff=1.0, factor=2.0, max_backoff=10.0, jitter=0.0)
    assert [retry.delay(n, 0.0) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_cap_applies_to_the_first_delay_too() -> None:
    assert Retry(backoff=60.0, max_backoff=5.0, jitter=0.0).delay(1, 0.0) == 5.0


def test_huge_attempt_numbers_do_not_overflow() -> None:
    # 2.0 ** 100_000 raises OverflowError in Python; the policy must cap instead.
    assert Retry(max_backoff=300.0, jitter=0.0).delay(100_000, 0.0) == 300.0
    assert Retry(max_backoff=math.inf, jitter=0.0).delay(100_000, 0.0) == math.inf


def test_zero_backoff_is_always_zero() -> None:
    retry = Retry(backoff=0.0, max_backoff=math.inf)
    assert retry.delay(1, 0.3) == 0.0
    assert retry.delay(100_000, 0.3) == 0.0


def test_jitter_shortens_by_the_given_fraction() -> None:
    retry = Retry(backoff=10.0, factor=1.0, jitter=0.5)
    assert retry.delay(1, 0.0) == 10.0
    assert retry.delay(1, 0.5) == 7.5
    assert retry.delay(1, 0.999) == pytest.approx(5.005)


def test_no_jitter_ignores_rand() -> None:
    retry = Retry(backoff=3.0, jitter=0.0)
    assert retry.delay(2, 0.0) == retry.delay(2, 0.9) == 6.0


@given(policies, attempts, rands)
def test_jittered_delay_stays_within_bounds(retry: Retry, attempt: int, rand: float) -> None:
    base = retry.delay(attempt, 0.0)
    delay = retry.delay(attempt, rand)
    assert 0.0 <= delay <= base <= retry.max_backoff
    assert delay >= base * (1.0 - retry.jitter) - 1e-9 * base


@given(policies, attempts, rands)
def test_delays_never_shrink_from_one_attempt_to_the_next(
    retry: Retry, attempt: int, rand: float
) -> None:
    # Compared at the same rand: jitter scales both delays alike.
    assert retry.delay(attempt, rand) <= retry.delay(attempt + 1, rand)


@given(policies, st.integers(1, 30))
def test_unjittered_delay_is_the_capped_exponential(retry: Retry, attempt: int) -> None:
    expected = min(retry.backoff * retry.factor ** (attempt - 1), retry.max_backoff)
    assert retry.delay(attempt, 0.0) == pytest.approx(expected)


@given(policies, attempts, rands)
def test_delay_is_deterministic(retry: Retry, attempt: int, rand: float) -> None:
    assert retry.delay(attempt, rand) == retry.delay(attempt, rand)


@pytest.mark.parametrize("rand", [-0.1, 1.0, 1.5, math.nan])
def test_rand_outside_unit_interval_is_refused(rand: float) -> None:
    with pytest.raises(ValueError, match="rand"):
        Retry().delay(1, rand)


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempts_start_at_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="attempt"):
        Retry().delay(attempt, 0.0)
    with pytest.raises(ValueError, match="attempt"):
        Retry(retries=3).should_retry(Transient(), attempt)


# -- what is retried ------------------------------------------------------------------------------


def test_retries_until_exhausted() -> None:
    retry = Retry(retries=3)
    assert [retry.should_retry(Transient(), n) for n in range(1, 6)] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_no_retries_means_one_attempt() -> None:
    assert not Retry().should_retry(Transient(), 1)


@given(st.integers(0, 100), st.integers(1, 200))
def test_retry_iff_attempts_remain(retries: int, attempt: int) -> None:
    assert Retry(retries=retries).should_retry(Transient(), attempt) == (attempt <= retries)


def test_abort_is_never_retried() -> None:
    retry = Retry(retries=5, retry_on=(BaseException,))
    assert not retry.should_retry(Abort("bad input"), 1)


def test_abort_subclass_is_never_retried() -> None:
    class Refused(Abort):
        pass

    assert not Retry(retries=5).should_retry(Refused(), 1)


def test_timeout_is_retried_like_any_exception() -> None:
    assert Retry(retries=1).should_retry(TimeoutError(), 1)


def test_timeout_follows_retry_on_and_dont_retry_on() -> None:
    assert not Retry(retries=1, retry_on=(Transient,)).should_retry(TimeoutError(), 1)
    assert not Retry(retries=1, dont_retry_on=(TimeoutError,)).should_retry(TimeoutError(), 1)


def test_only_retry_on_is_retried() -> None:
    retry = Retry(retries=2, retry_on=(Transient, OSError))
    assert retry.should_retry(Transient(), 1)
    assert retry.should_retry(ConnectionResetError(), 1)  # an OSError subclass
    assert not retry.should_retry(ValueError(), 1)


def test_dont_retry_on_wins_over_retry_on() -> None:
    retry = Retry(retries=2, retry_on=(Transient,), dont_retry_on=(Permanent,))
    assert retry.should_retry(Transient(), 1)
    assert not retry.should_retry(Permanent(), 1)


def test_base_exceptions_are_not_retried_by_default() -> None:
    retry = Retry(retries=2)
    assert not retry.should_retry(KeyboardInterrupt(), 1)
    assert not retry.should_retry(SystemExit(1), 1)


def test_empty_retry_on_retries_nothing() -> None:
    assert not Retry(retries=2, retry_on=()).should_retry(Transient(), 1)


# -- next_eta -------------------------------------------------------------------------------------


def test_next_eta_is_now_plus_delay() -> None:
    retry = Retry(retries=3, backoff=2.0, jitter=0.5)
    assert retry.next_eta(Transient(), 2, now=1000.0, rand=0.5) == 1000.0 + 4.0 * 0.75


def test_next_eta_is_none_when_giving_up() -> None:
    retry = Retry(retries=1)
    assert retry.next_eta(Transient(), 2, now=1000.0, rand=0.0) is None
    assert retry.next_eta(Abort(), 1, now=1000.0, rand=0.0) is None


@given(policies, st.integers(1, 60), st.floats(0.0, 2e9), rands)
def test_next_eta_agrees_with_should_retry_and_delay(
    retry: Retry, attempt: int, now: float, rand: float
) -> None:
    eta = retry.next_eta(Transient(), attempt, now, rand)
    if retry.should_retry(Transient(), attempt):
        assert eta == now + retry.delay(attempt, rand)
        assert eta is not None
        assert eta >= now
    else:
        assert eta is None


# -- coerce ---------------------------------------------------------------------------------------


def test_coerce_keeps_a_policy() -> None:
    retry = Retry(retries=4, backoff=9.0)
    assert Retry.coerce(retry) is retry


def test_coerce_none_is_no_retries() -> None:
    assert Retry.coerce(None) == Retry()
    assert Retry.coerce(None).max_attempts == 1


@pytest.mark.parametrize("retries", [0, 1, 7])
def test_coerce_int_is_a_number_of_retries(retries: int) -> None:
    assert Retry.coerce(retries) == Retry(retries=retries)


@pytest.mark.parametrize("value", [True, 1.5, "3", [3]])
def test_coerce_refuses_other_types(value: object) -> None:
    with pytest.raises(ConfigurationError, match="retries must be"):
        Retry.coerce(value)  # type: ignore[arg-type]


def test_coerce_refuses_a_negative_int() -> None:
    with pytest.raises(ConfigurationError, match="retries"):
        Retry.coerce(-1)


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retries", -1),
        ("retries", 1.5),
        ("retries", True),
        ("backoff", -0.001),
        ("backoff", math.nan),
        ("backoff", math.inf),
        ("factor", 0.5),
        ("factor", 0.0),
        ("factor", -2.0),
        ("factor", math.inf),
        ("max_backoff", -1.0),
        ("max_backoff", math.nan),
        ("jitter", -0.1),
        ("jitter", 1.01),
        ("jitter", math.nan),
        ("jitter", "0.5"),
        ("retry_on", ValueError),
        ("retry_on", ("ValueError",)),
        ("dont_retry_on", [ValueError]),
        ("dont_retry_on", (int,)),
    ],
)
def test_bad_values_are_refused_naming_field_and_value(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        Retry(**{field: value})  # type: ignore[arg-type]
    message = str(info.value)
    assert field in message
    assert repr(value) in message
    assert isinstance(info.value, CronbusError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"retries": 0},
        {"backoff": 0.0},
        {"factor": 1.0},
        {"max_backoff": 0.0},
        {"max_backoff": math.inf},
        {"jitter": 0.0},
        {"jitter": 1.0},
        {"backoff": 2},  # an int is a fine number of seconds
        {"retry_on": (), "dont_retry_on": (KeyboardInterrupt,)},
    ],
)
def test_edge_values_are_accepted(kwargs: dict[str, object]) -> None:
    Retry(**kwargs)  # type: ignore[arg-type]
