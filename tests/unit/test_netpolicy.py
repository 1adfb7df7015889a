"""The webhook network policy, URL checks at creation, and masking of what subscriptions show."""

from __future__ import annotations

import pytest

from cronbus.errors import CronbusError, InvalidArgumentError
from cronbus.events import generate_secret
from cronbus.events.masking import host_label, mask_url, public_target, short_url
from cronbus.events.netpolicy import ALLOW_ENV, DENY_ENV, DeniedAddressError, NetPolicy
from cronbus.events.records import Subscription, SubscriptionSpec
from cronbus.events.resolvers import FilteringResolver, StaticResolver
from cronbus.events.targets import check_target, check_url

DENIED_BY_DEFAULT = [
    "169.254.169.254",
    "169.254.1.1",
    "fe80::1",
    "fd00:ec2::254",
    "100.100.100.200",
    "0.0.0.0",
    "0.1.2.3",
    "::",
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    "255.255.255.255",
    "::ffff:169.254.169.254",  # an IPv4-mapped form of the metadata address
]
ALLOWED_BY_DEFAULT = ["127.0.0.1", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "8.8.8.8"]


@pytest.mark.parametrize("address", DENIED_BY_DEFAULT)
def test_the_default_policy_denies_link_local_metadata_unspecified_and_multicast(
    address: str,
) -> None:
    policy = NetPolicy.from_env({})
    assert not policy.allows(address)
    with pytest.raises(DeniedAddressError, match="denied network"):
        policy.check(address, "webhook")


@pytest.mark.parametrize("address", ALLOWED_BY_DEFAULT)
def test_loopback_private_and_public_addresses_are_allowed_by_default(address: str) -> None:
    assert NetPolicy.from_env({}).allows(address)


def test_deny_adds_to_the_defaults_and_allow_overrides_deny() -> None:
    policy = NetPolicy.from_env({DENY_ENV: "127.0.0.0/8, ::1/128,10.0.0.0/8"})
    assert not policy.allows("127.0.0.1")
    assert not policy.allows("::1")
    assert not policy.allows("10.9.9.9")
    assert not policy.allows("169.254.169.254")  # the defaults stay
    policy = NetPolicy.from_env({DENY_ENV: "10.0.0.0/8", ALLOW_ENV: "10.1.2.3,169.254.0.0/16"})
    assert policy.allows("10.1.2.3")
    assert not policy.allows("10.1.2.4")
    assert policy.allows("169.254.169.254")  # allowed on purpose


def test_a_bad_network_in_the_environment_is_one_clear_error() -> None:
    with pytest.raises(InvalidArgumentError, match="CRONBUS_WEBHOOK_DENY: 'not-a-net'"):
        NetPolicy.from_env({DENY_ENV: "10.0.0.0/8,not-a-net"})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://169.254.169.254/latest/meta-data", "denied network"),
        ("http://0.0.0.0:8080/x", "denied network"),
        ("http://[::]/x", "denied network"),
        ("http://[fe80::1]/x", "denied network"),
        ("http://[::ffff:169.254.169.254]/x", "denied network"),
        ("http://224.0.0.1/x", "denied network"),
        ("http://example.com/a b", "spaces"),
        ("http://exa mple.com/", "spaces"),
        ("http://example.com/\x00", "control"),
        ("http://[::1/x", "does not parse"),
        ("http://example.com:99999/", "does not parse"),
        ("ftp://example.com/", "http"),
        ("http:///nohost", "http"),
        ("http://2130706433/", "looks like an address"),
        ("http://127.1/", "looks like an address"),
        ("http://" + "a" * 3000, "characters"),
    ],
)
def test_bad_webhook_urls_are_refused_with_one_line(url: str, message: str) -> None:
    with pytest.raises(CronbusError, match=message) as caught:
        check_target({"kind": "webhook", "url": url})
    text = str(caught.value)
    assert "\n" not in text
    assert len(text) < 400


def test_allowed_literal_and_named_urls_pass() -> None:
    for url in ("http://127.0.0.1:8080/x", "http://[::1]:8080/x", "https://hooks.example.com/a"):
        assert check_url(url) == url


def test_the_environment_decides_at_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DENY_ENV, "127.0.0.0/8")
    with pytest.raises(DeniedAddressError):
        check_url("http://127.0.0.1:1/x")
    monkeypatch.setenv(ALLOW_ENV, "127.0.0.1")
    assert check_url("http://127.0.0.1:1/x")


async def test_the_filtering_resolver_drops_denied_addresses() -> None:
    table = StaticResolver(
        {"mixed.test": ["169.254.169.254", "127.0.0.1"], "meta.test": ["169.254.169.254"]}
    )
    resolver = FilteringResolver(NetPolicy.from_env({}), table)
    (kept,) = await resolver.resolve("mixed.test", 80)
    assert kept["host"] == "127.0.0.1"
    with pytest.raises(OSError, match="resolves only to denied addresses"):
        await resolver.resolve("meta.test", 80)


def test_masking_urls_headers_and_secrets() -> None:
    url = "https://bob:hunter2@hooks.example.com:8443/in/abc?token=s3cr3t&v=1#frag"
    masked = mask_url(url)
    assert masked == "https://***@hooks.example.com:8443/in/abc?token=***&v=***#***"
    assert host_label(url) == "hooks.example.com:8443"
    assert host_label("http://[::1]:9/x") == "[::1]:9"
    assert "hunter2" not in short_url(url, 20)
    assert len(short_url(url, 20)) == 20
    secret = generate_secret()
    target = {
        "kind": "webhook",
        "url": url,
        "headers": {"Authorization": "Bearer tok-123"},
        "secrets": [secret],
    }
    shown = public_target(target)
    assert shown["headers"] == {"Authorization": "***"}
    assert shown["secret_count"] == 1
    text = repr(shown)
    for secret_text in ("hunter2", "s3cr3t", "tok-123", secret):
        assert secret_text not in text
    assert public_target({"kind": "task", "task": "t", "queue": None})["task"] == "t"


def test_a_subscription_repr_shows_no_secret() -> None:
    secret = generate_secret()
    spec = SubscriptionSpec(
        name="s",
        topic="t",
        target={
            "kind": "webhook",
            "url": "https://u:pw-xyz@h.example/x?key=q-abc",
            "headers": {"X-Api-Key": "k-789"},
            "secrets": [secret],
        },
    )
    sub = Subscription(
        spec=spec,
        id=1,
        cursor=0,
        paused=False,
        disabled_reason=None,
        holder=None,
        lease_expires_at=None,
        created_at=0.0,
        updated_at=0.0,
    )
    for text in (repr(spec), repr(sub), str(sub)):
        assert "h.example" in text
        for secret_text in ("pw-xyz", "q-abc", "k-789", secret):
            assert secret_text not in text
