"""The API's own pieces without a server: its settings from CRONBUS_API_*, the per-token
bucket and the per-address failure bucket (on a fake clock), client addresses behind trusted
proxies, and how a validation error's location names the field."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from cronbus.api import ApiSettings
from cronbus.api.clients import Clients
from cronbus.api.problems import field_name
from cronbus.api.ratelimit import FailureLimiter, RateLimiter
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


def test_session_proxy_and_failure_settings_from_the_environment() -> None:
    loaded = ApiSettings.load(
        {
            "CRONBUS_CONSOLE_IDLE_SECONDS": "600",
            "CRONBUS_CONSOLE_LIFETIME_SECONDS": "86400",
            "CRONBUS_API_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8 ::1",
            "CRONBUS_API_AUTH_FAILURE_BURST": "5",
            "CRONBUS_API_AUTH_FAILURES": "2",
            "CRONBUS_API_AUTH_ADDRESSES": "100",
        }
    )
    assert loaded.console_idle_seconds == 600.0
    assert loaded.console_lifetime_seconds == 86400.0
    assert loaded.trusted_proxies == ("127.0.0.1", "10.0.0.0/8", "::1")
    assert (loaded.auth_failure_burst, loaded.auth_failures, loaded.auth_addresses) == (5, 2, 100)
    defaults = ApiSettings()
    assert defaults.trusted_proxies == ()  # nobody's X-Forwarded-* is believed by default
    assert (defaults.auth_failure_burst, defaults.auth_failures) == (20, 10)
    for variable, value in (
        ("CRONBUS_API_TRUSTED_PROXIES", "10.0.0.0/33"),
        ("CRONBUS_API_TRUSTED_PROXIES", "proxy.example"),
        ("CRONBUS_CONSOLE_IDLE_SECONDS", "5"),
        ("CRONBUS_API_AUTH_FAILURES", "0"),
    ):
        with pytest.raises(ConfigurationError, match=variable):
            ApiSettings.load({variable: value})


def test_failures_refill_and_good_credentials_pass_a_blocked_address() -> None:
    now = [0.0]
    limiter = FailureLimiter(per_minute=60, burst=2, max_addresses=10, clock=lambda: now[0])
    limiter.succeeded("good")
    for _ in range(2):
        limiter.check("a", "guess")
        limiter.failed("a", "guess")
    with pytest.raises(RateLimitedError) as refused:
        limiter.check("a", "guess")
    assert refused.value.retry_after == pytest.approx(1.0)
    limiter.check("a", "good")  # good here before: passes
    limiter.check("b", "guess")  # its own bucket
    limiter.failed("a", "good")  # a good one that fails (revoked) is good no more
    with pytest.raises(RateLimitedError):
        limiter.check("a", "good")
    now[0] = 1.0
    limiter.check("a", "guess")  # one failure refilled


def test_the_failure_table_stays_bounded() -> None:
    limiter = FailureLimiter(per_minute=1, burst=1, max_addresses=3, clock=lambda: 0.0)
    for address in "abcd":
        limiter.failed(address)
    assert len(limiter._buckets) == 3
    limiter.check("a", None)  # the least recently failing was forgotten
    with pytest.raises(RateLimitedError):
        limiter.check("d", None)


def _request(peer: str, headers: dict[str, str], scheme: str = "http") -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "scheme": scheme, "client": (peer, 1234), "headers": raw}
    scope.update(method="GET", path="/", query_string=b"", server=("127.0.0.1", 80))
    return Request(scope)


def test_client_addresses_and_schemes_behind_trusted_proxies_only() -> None:
    trusting = Clients(["10.0.0.0/8"])
    forwarded = {"X-Forwarded-For": "198.51.100.1, 203.0.113.5, 10.0.0.2"}
    https = {"X-Forwarded-Proto": "https"}
    assert trusting.address(_request("10.0.0.1", forwarded)) == "203.0.113.5"
    assert trusting.address(_request("192.0.2.1", forwarded)) == "192.0.2.1"
    assert Clients().address(_request("10.0.0.1", forwarded)) == "10.0.0.1"
    assert trusting.https(_request("10.0.0.1", https))
    assert not trusting.https(_request("192.0.2.1", https))
    assert Clients().https(_request("192.0.2.1", {}, scheme="https"))
    # One IPv6 host may hold a whole /64: its addresses share one allowance.
    assert Clients().address(_request("2001:db8::1", {})) == "2001:db8::/64"
    assert Clients().address(_request("2001:db8::ffff", {})) == "2001:db8::/64"
