"""The API's own pieces without a server: its settings from CRONBUS_API_*, the per-token
bucket (on a fake clock), and how a validation error's location names the field."""

from __future__ import annotations

import pytest

from cronbus.api import ApiSettings
from cronbus.api.problems import field_name
from cronbus.api.ratelimit import RateLimiter
from cronbus.errors import ConfigurationError, RateLimitedError


def test_settings_from_the_environment() -> None:
    assert ApiSettings.load({}) == ApiSettings()
    loaded = ApiSettings.load(
        {
            "CRONBUS_API_RATE": "60",
            "CRONBUS_API_BURST": "5",
            "CRONBUS_API_MAX_BODY": "1024",
            "CRONBUS_API_IDEMPOTENCY_TTL": "3600",
        }
    )
    assert (loaded.rate, loaded.bucket_size, loaded.max_body, loaded.idempotency_ttl) == (
        60,
        5,
        1024,
        3600.0,
    )
    assert ApiSettings.load({"CRONBUS_API_RATE": "60"}).bucket_size == 60
    assert ApiSettings.load({}, rate=7).rate == 7
    for variable, value in (
        ("CRONBUS_API_RATE", "abc"),
        ("CRONBUS_API_RATE", "0"),
        ("CRONBUS_API_MAX_BODY", "-1"),
        ("CRONBUS_API_IDEMPOTENCY_TTL", "nan"),
    ):
        with pytest.raises(ConfigurationError, match=variable):
            ApiSettings.load({variable: value})


def test_token_bucket_refills_at_the_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(per_minute=60, size=2, clock=lambda: now[0])
    limiter.admit("a")
    limiter.admit("a")
    with pytest.raises(RateLimitedError) as refused:
        limiter.admit("a")
    assert refused.value.retry_after == pytest.approx(1.0)
    limiter.admit("b")  # its own bucket
    now[0] = 0.5
    with pytest.raises(RateLimitedError) as again:
        limiter.admit("a")
    assert again.value.retry_after == pytest.approx(0.5)
    now[0] = 1.0
    limiter.admit("a")
    now[0] = 100.0
    limiter.admit("a")
    limiter.admit("a")  # refilled to the bucket's size, no more
    with pytest.raises(RateLimitedError):
        limiter.admit("a")


def test_the_bucket_table_stays_bounded() -> None:
    now = [0.0]
    limiter = RateLimiter(per_minute=60, size=1, clock=lambda: now[0], max_buckets=3)
    for key in "abc":
        limiter.admit(key)
    now[0] = 10.0  # all refilled: forgetting them changes nothing
    limiter.admit("d")
    assert len(limiter._buckets) == 1


@pytest.mark.parametrize(
    ("loc", "name"),
    [
        (("query", "limit"), "limit"),
        (("query", "state", 0), "state[0]"),
        (("header", "x-cronbus-namespace"), "x-cronbus-namespace"),
        (("body", "every", "float"), "every"),
        (("body", "misfire", "Misfire"), "misfire"),
        (("body", "events", 2, "type"), "events[2].type"),
        (("body", "at", "function-after[check(), str]"), "at"),
        (("body",), "body"),
        (("body", 17), "body"),
    ],
)
def test_field_names(loc: tuple[object, ...], name: str) -> None:
    assert field_name(loc) == name
