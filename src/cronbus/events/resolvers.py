"""Resolvers for the dispatcher's HTTP client: one that applies the webhook network policy to
every address a name resolves to, and a fixed table for tests.

Kept apart from :mod:`cronbus.events.netpolicy` because they subclass aiohttp's resolver: only
the dispatcher needs aiohttp, and importing it costs every ``cronbus`` command a third of a
second it would not use.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Mapping, Sequence

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from .netpolicy import ALLOW_ENV, DENY_ENV, NetPolicy


class FilteringResolver(AbstractResolver):
    """Resolves host names, then drops every address the policy denies.

    aiohttp connects only to what the resolver returns, so a name that resolves to a denied
    address fails with "resolves only to denied addresses" instead of reaching it. Literal IP
    addresses never reach a resolver; :class:`~cronbus.events.targets.WebhookTarget` checks
    those itself.
    """

    def __init__(self, policy: NetPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self.inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The allowed addresses of ``host``; ``OSError`` when none is allowed."""
        found = await self.inner.resolve(host, port, family)
        kept = [r for r in found if self.policy.allows(r["host"])]
        if not kept:
            denied = ", ".join(sorted({r["host"] for r in found}))[:80]
            raise OSError(
                errno.EACCES,
                f"{host} resolves only to denied addresses ({denied}); see {DENY_ENV} and "
                f"{ALLOW_ENV}",
            )
        return kept

    async def close(self) -> None:
        """Close the inner resolver."""
        await self.inner.close()


class StaticResolver(AbstractResolver):
    """Resolves names from a fixed table; for tests that need a name pointing somewhere."""

    def __init__(self, table: Mapping[str, Sequence[str]]) -> None:
        self.table = {name: list(addresses) for name, addresses in table.items()}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The table's addresses of ``host``; ``OSError`` for an unknown name."""
        addresses = self.table.get(host)
        if not addresses:
            raise OSError(errno.ENOENT, f"{host} is not in the table")
        return [_result(host, address, port) for address in addresses]

    async def close(self) -> None:
        """Nothing to close."""


def _result(host: str, address: str, port: int) -> ResolveResult:
    ip = ipaddress.ip_address(address)
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    return ResolveResult(
        hostname=host,
        host=address,
        port=port,
        family=family,
        proto=0,
        flags=socket.AI_NUMERICHOST,
    )
