"""API tokens: create (the token is shown once), list, revoke, and authenticate a request.

A token reads ``cb_<id>_<secret>``: the id (12 hex characters) is public and names the token
in lists and in the audit log; the secret is ``secrets.token_urlsafe(32)`` (256 bits). The
store keeps only the sha256 hex of the whole text: with that much entropy a slow hash adds
nothing, and a lookup by hash finds the token in one indexed read.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import replace

from ..admin_records import ALL_NAMESPACES, TokenRecord
from ..errors import InvalidArgumentError, UnauthorizedError
from ..store.admin_ports import TOUCH_EVERY
from ..validation import check_namespace, check_seconds, check_text, shorten
from .access import Access, Scope, check_scope
from .context import Context, naming

PREFIX = "cb_"
"""What every cronbus token starts with (so secret scanners can find leaked ones)."""
_TOKEN = re.compile(r"cb_([0-9a-f]{12})_([A-Za-z0-9_-]{43})", re.ASCII)
_TOKEN_ID = re.compile(r"[0-9a-f]{12}", re.ASCII)
NAME_LENGTH = 200
"""The longest token name."""


def hash_token(token: str) -> str:
    """The sha256 hex of a token's whole text, as the store keeps it."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh token: its public id and its whole text."""
    token_id = secrets.token_hex(6)
    return token_id, f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"


def check_token_id(value: object, field: str = "token_id") -> str:
    """A token id: the 12 hex characters after ``cb_``."""
    if not isinstance(value, str) or not _TOKEN_ID.fullmatch(value):
        raise InvalidArgumentError(
            f"{field} must be a token id (12 hex characters), got {shorten(value)}", field=field
        )
    return value


def shown(record: TokenRecord) -> TokenRecord:
    """A token record as it may be shown: without its hash."""
    return replace(record, hash="")


class TokensService:
    """API tokens of the store (admin of every namespace only, except ``authenticate``)."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def create(
        self,
        name: str,
        scope: Scope | str,
        namespaces: Iterable[str],
        expires_in: float | None = None,
        payloads: bool = True,
    ) -> tuple[TokenRecord, str]:
        """Create a token with ``scope`` in ``namespaces`` (``*``: every namespace, present and
        future); returns its record and its text, which is shown this once and never stored.
        Each namespace must exist (``default`` always does). ``payloads=False`` makes a token
        that sees runs' arguments and results redacted (:mod:`.redaction`)."""
        self._c.admin()
        with naming("name"):
            name = check_text(name, "name", max_length=NAME_LENGTH)
        chosen_scope = check_scope(scope)
        if not isinstance(payloads, bool):
            raise InvalidArgumentError(
                f"payloads must be true or false, got {shorten(payloads)}", field="payloads"
            )
        chosen = await self._namespaces(namespaces)
        now = self._c.now()
        expires_at = None
        if expires_in is not None:
            with naming("expires_in"):
                expires_at = now + check_seconds(expires_in, "expires_in", positive=True)
        token_id, token = new_token()
        record = TokenRecord(
            id=token_id,
            name=name,
            hash=hash_token(token),
            scope=chosen_scope.value,
            namespaces=chosen,
            created_at=now,
            created_by=self._c.access.token_id or self._c.access.actor,
            expires_at=expires_at,
            payloads=payloads,
        )
        await self._c.store.put_token(record)
        await self._c.audit(
            "tokens.create",
            token_id,
            {
                "name": name,
                "scope": chosen_scope.value,
                "namespaces": list(chosen),
                "payloads": payloads,
            },
            namespace=None,
        )
        return shown(record), token

    async def _namespaces(self, given: Iterable[str]) -> tuple[str, ...]:
        if isinstance(given, str):
            given = [given]
        names = list(dict.fromkeys(given))
        if not names:
            raise InvalidArgumentError("give at least one namespace (or *)", field="namespaces")
        if ALL_NAMESPACES in names:
            if len(names) > 1:
                raise InvalidArgumentError("* (every namespace) goes alone", field="namespaces")
            return (ALL_NAMESPACES,)
        for value in names:
            check_namespace(value, "namespaces")
        known = {ns.name for ns in await self._c.store.list_namespaces()}
        missing = [n for n in names if n not in known]
        if missing:
            raise InvalidArgumentError(
                f"no namespace named {missing[0]!r}; create it first (namespaces create)",
                field="namespaces",
            )
        return tuple(sorted(names))

    async def list(self) -> builtins.list[TokenRecord]:
        """Every token, oldest first, without its hash (revoked and expired ones too)."""
        self._c.admin()
        return [shown(t) for t in await self._c.store.list_tokens()]

    async def get(self, token_id: str) -> TokenRecord:
        """One token by id, without its hash."""
        self._c.admin()
        return shown(await self._c.store.get_token(check_token_id(token_id)))

    async def revoke(self, token_id: str) -> TokenRecord:
        """Revoke a token: requests carrying it are refused from now on, and its console
        sessions end (the store deletes them with the revocation). Revoking it again changes
        nothing."""
        self._c.admin()
        token_id = check_token_id(token_id)
        record = await self._c.store.revoke_token(token_id, self._c.now())
        await self._c.audit("tokens.revoke", token_id, {"name": record.name}, namespace=None)
        return shown(record)

    async def authenticate(self, token: str | None) -> Access:
        """The access a token grants: :class:`~cronbus.errors.UnauthorizedError` when it is
        missing, malformed, unknown, revoked or expired. No access is needed to call it."""
        return access_of(await self.live_record(token))

    async def live_record(self, token: str | None) -> TokenRecord:
        """The record of a token that is valid now (noted as used), with its hash:
        :class:`~cronbus.errors.UnauthorizedError` as :meth:`authenticate` says."""
        if not isinstance(token, str) or not token:
            raise UnauthorizedError("no token: send Authorization: Bearer <token>")
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise UnauthorizedError("not a cronbus token (they read cb_<id>_<secret>)")
        record = await self._c.store.token_by_hash(hash_token(token))
        # The id is checked too, though the hash decides: a token is valid only whole.
        if record is None or record.id != match[1]:
            raise UnauthorizedError("unknown token")
        now = self._c.now()
        check_live(record, now)
        # The record says when it was last noted: within TOUCH_EVERY the store would write
        # nothing, so most requests skip the round trip.
        if record.last_used_at is None or now - record.last_used_at >= TOUCH_EVERY:
            await self._c.store.touch_token(record.id, now)
        return record


def check_live(record: TokenRecord, now: float) -> None:
    """Refuse a token that was revoked or has expired (UnauthorizedError saying which)."""
    if record.revoked_at is not None:
        raise UnauthorizedError(f"token {record.id} was revoked")
    if not record.live(now):
        raise UnauthorizedError(f"token {record.id} expired")


def access_of(record: TokenRecord) -> Access:
    """The access a (live) token's record grants."""
    access = Access.of(record.name, record.scope, record.namespaces, token_id=record.id)
    return replace(access, payloads=record.payloads)
