"""Which networks webhooks may reach: an allow list and a deny list of CIDR networks.

A webhook URL is user input that makes cronbus send requests from inside the operator's
network, so some addresses are refused by default:

* link-local ``169.254.0.0/16`` and ``fe80::/10``, where cloud metadata services answer;
* the cloud metadata addresses themselves: ``169.254.169.254``, ``fd00:ec2::254`` (AWS IPv6)
  and ``100.100.100.200`` (Alibaba Cloud);
* unspecified addresses ``0.0.0.0/8`` and ``::`` (which reach the local host on Linux);
* multicast ``224.0.0.0/4`` and ``ff00::/8``, and the broadcast address ``255.255.255.255``.

Loopback and private ranges are allowed by default: tests and internal services use them.

``CRONBUS_WEBHOOK_DENY`` adds comma-separated CIDR networks to the deny list (for example
``127.0.0.0/8,::1/128,10.0.0.0/8`` to keep webhooks off the local host and the private network);
``CRONBUS_WEBHOOK_ALLOW`` lists networks that are allowed even where the deny list refuses them
(``169.254.0.0/16`` to reach a link-local service on purpose). Allow entries override deny
entries. To allow only some networks, deny ``0.0.0.0/0,::/0`` and allow those.

The policy is checked twice: when a subscription is created (a literal IP address in its URL)
and at every delivery, on the addresses the host name resolves to, so a DNS name that resolves
to a denied address cannot get around it
(:class:`~cronbus.events.resolvers.FilteringResolver`).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import InvalidArgumentError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOW_ENV = "CRONBUS_WEBHOOK_ALLOW"
DENY_ENV = "CRONBUS_WEBHOOK_DENY"

DEFAULT_DENY: tuple[str, ...] = (
    "169.254.0.0/16",  # IPv4 link-local (cloud metadata lives here)
    "fe80::/10",  # IPv6 link-local
    "169.254.169.254/32",  # AWS, GCP, Azure, OpenStack metadata
    "fd00:ec2::254/128",  # AWS metadata over IPv6
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "0.0.0.0/8",  # "this network", unspecified
    "::/128",  # IPv6 unspecified
    "224.0.0.0/4",  # IPv4 multicast
    "ff00::/8",  # IPv6 multicast
    "255.255.255.255/32",  # broadcast
)
"""Networks webhooks may not reach unless ``CRONBUS_WEBHOOK_ALLOW`` allows them."""


class DeniedAddressError(InvalidArgumentError):
    """A webhook's address is in a denied network (see CRONBUS_WEBHOOK_DENY and _ALLOW)."""


def parse_networks(text: str, variable: str) -> tuple[Network, ...]:
    """Comma-separated CIDR networks (a bare address is a /32 or /128)."""
    found = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            found.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise InvalidArgumentError(
                f"{variable}: {part[:80]!r} is not a network like 10.0.0.0/8 or fd00::/8"
            ) from None
    return tuple(found)


def _plain(address: Address) -> Address:
    """The IPv4 address inside an IPv4-mapped or NAT64-free IPv6 form, else the address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class NetPolicy:
    """Allowed and denied networks; an address in an allowed network is always allowed."""

    deny: tuple[Network, ...]
    allow: tuple[Network, ...] = ()

    @classmethod
    def default(cls) -> NetPolicy:
        """The default deny list, nothing explicitly allowed."""
        return cls(deny=parse_networks(",".join(DEFAULT_DENY), "default deny list"))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NetPolicy:
        """The default deny list plus ``CRONBUS_WEBHOOK_DENY``, and ``CRONBUS_WEBHOOK_ALLOW``."""
        env = os.environ if env is None else env
        base = cls.default()
        return cls(
            deny=base.deny + parse_networks(env.get(DENY_ENV, ""), DENY_ENV),
            allow=parse_networks(env.get(ALLOW_ENV, ""), ALLOW_ENV),
        )

    def allows(self, address: str | Address) -> bool:
        """Whether webhooks may connect to ``address``."""
        ip = _plain(ipaddress.ip_address(address) if isinstance(address, str) else address)
        if any(ip in net for net in self.allow if net.version == ip.version):
            return True
        return not any(ip in net for net in self.deny if net.version == ip.version)

    def check(self, address: str | Address, what: str) -> None:
        """Raise :class:`DeniedAddressError` naming ``what`` when ``address`` is denied."""
        if not self.allows(address):
            raise DeniedAddressError(
                f"{what}: the address {address} is in a denied network (webhooks may not "
                f"reach link-local, metadata, unspecified or multicast addresses, nor those "
                f"of {DENY_ENV}; allow it with {ALLOW_ENV})"
            )


def literal_address(host: str) -> Address | None:
    """The IP address a URL's host names literally (``[::1]`` included), or None for a name."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])  # a zone id is not part of it
    except ValueError:
        return None


def numeric_lookalike(host: str) -> bool:
    """A host made of digits and dots (``2130706433``, ``127.1``, ``0x7f.1``) that is not a
    canonical IPv4 address: resolvers read them as addresses, so they are refused."""
    parts = host.lower().split(".")
    return all(p.isdigit() or (p.startswith("0x") and p[2:].isalnum()) for p in parts if p)


def describe(networks: Iterable[Network]) -> str:
    """Networks as comma-separated text (for docs and messages)."""
    return ",".join(str(net) for net in networks)
