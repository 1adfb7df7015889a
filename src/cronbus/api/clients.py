"""Who is on the other end of a request: the client's address and whether it came over HTTPS.

By default the TCP peer is the client and the connection's own scheme counts: any header a
client sends about itself is its own word. Behind a reverse proxy, every peer is the proxy;
``CRONBUS_API_TRUSTED_PROXIES`` names the proxies whose ``X-Forwarded-For`` and
``X-Forwarded-Proto`` are believed. ``X-Forwarded-For`` is read from the right (each proxy
appends the address it saw), skipping trusted proxies: the first address that is not one is the
client's, so a client cannot choose its own address by sending the header itself.

An IPv6 client is keyed by its /64 network: one host may hold that whole network, so counting
its addresses apart would let it reset its own limits at will.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.requests import HTTPConnection

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_LONGEST = 64
"""Characters kept of an address a trusted proxy forwarded that does not parse."""


class Clients:
    """Resolves a request's client address and scheme, believing the proxies given."""

    def __init__(self, trusted: Iterable[str] = ()) -> None:
        self.trusted: tuple[Network, ...] = tuple(
            ipaddress.ip_network(item, strict=False) for item in trusted
        )

    def _trusts(self, address: str) -> bool:
        if not self.trusted:
            return False
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(parsed in network for network in self.trusted)

    def _peer(self, request: HTTPConnection) -> str:
        return request.client.host if request.client is not None else ""

    def address(self, request: HTTPConnection) -> str:
        """The client's address (IPv6: its /64 network), as a rate limit's key."""
        peer = self._peer(request)
        found = peer
        if self._trusts(peer):
            hops = [
                hop.strip()
                for header in request.headers.getlist("x-forwarded-for")
                for hop in header.split(",")
                if hop.strip()
            ]
            for hop in reversed(hops):
                found = hop
                if not self._trusts(hop):
                    break
        return _key(found)

    def https(self, request: HTTPConnection) -> bool:
        """True when the client reached us over HTTPS: directly, or as a trusted proxy says
        (the rightmost ``X-Forwarded-Proto``, the one the nearest proxy wrote)."""
        if request.url.scheme in ("https", "wss"):
            return True
        if not self._trusts(self._peer(request)):
            return False
        said = ",".join(request.headers.getlist("x-forwarded-proto")).split(",")
        return said[-1].strip().lower() == "https"


def _key(address: str) -> str:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:_LONGEST]
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)
