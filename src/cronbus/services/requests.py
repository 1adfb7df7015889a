"""Requests made twice: the records behind ``Idempotency-Key``, so a retried request gets the
first one's answer instead of doing the change again.

A key is scoped by its caller (the token) and its route; the HTTP API decides what a route and
an answer are, this service keeps them in the store. No access check beyond being a caller: a
key names only the caller's own requests.
"""

from __future__ import annotations

from ..admin_records import JSON, IdempotencyRecord
from .context import Context


class RequestsService:
    """Claim, finish, release and trim the records of idempotent requests."""

    def __init__(self, context: Context) -> None:
        self._c = context

    def _caller(self) -> str:
        return self._c.access.token_id or self._c.access.actor

    async def claim(self, route: str, key: str, body_hash: str) -> IdempotencyRecord | None:
        """Claim ``key`` for this caller and route: None when the caller is the first (it now
        owns the key and must finish or release it), else the record stored by the first (which
        may still be in progress)."""
        return await self._c.store.claim_idempotency(
            self._caller(), route, key, body_hash, self._c.now()
        )

    async def finish(self, route: str, key: str, status: int, response: JSON) -> None:
        """Store the answer of the request that owns ``key``."""
        await self._c.store.finish_idempotency(self._caller(), route, key, status, response)

    async def release(self, route: str, key: str) -> None:
        """Give ``key`` up (the request failed on our side), so a retry may run it again."""
        await self._c.store.release_idempotency(self._caller(), route, key)

    async def trim(self, older_than: float) -> int:
        """Delete the records of every caller claimed before ``older_than``; how many."""
        return await self._c.store.trim_idempotency(older_than)
