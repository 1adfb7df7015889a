"""Console sessions: a login exchanges an API token for a random session id, which is all the
browser keeps (its cookie); every request turns the id back into the token's access.

The id is ``secrets.token_urlsafe(32)`` (256 bits); the store keeps only its sha256, so a copy
of the database opens no session. A session ends at its lifetime (bounded by its token's
expiry), after an idle spell, at logout (its row is deleted, so a copied cookie stops working
too) and when its token is revoked (the store deletes the token's sessions in the revocation's
transaction; a lookup checks the token anyway). Nobody's access is needed to log in: the token
is the credential.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, replace

from ..admin_records import ConsoleSession
from ..errors import UnauthorizedError
from ..store.admin_ports import TOUCH_EVERY
from .access import Access
from .context import Context
from .tokens import TokensService, access_of, check_live

_ENDED = "the console session ended (logged out, idle, expired or revoked): log in again"


def hash_session(session_id: str) -> str:
    """The sha256 hex of a session id, as the store keeps it."""
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionGrant:
    """A live session: its stored record, its token's access, and when it ends at the latest
    if nobody uses it (the sooner of its expiry and its idle deadline)."""

    record: ConsoleSession
    access: Access
    ends_at: float


class ConsoleSessionsService:
    """Opening, resuming and closing console sessions."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def open(self, token: str, lifetime: float, idle: float) -> tuple[str, SessionGrant]:
        """Log in with ``token``: a new session id (for the cookie, shown this once) and its
        grant; UnauthorizedError if the token is not valid. The session lives ``lifetime``
        seconds at most, never past the token's expiry, and ends after ``idle`` seconds unused.
        Sessions that ended are trimmed here (logins are rare; requests are many)."""
        record = await TokensService(self._c).live_record(token)
        now = self._c.now()
        expires_at = now + lifetime
        if record.expires_at is not None:
            expires_at = min(expires_at, record.expires_at)
        session_id = secrets.token_urlsafe(32)
        stored = ConsoleSession(
            hash=hash_session(session_id),
            token_id=record.id,
            created_at=now,
            last_seen_at=now,
            expires_at=expires_at,
        )
        await self._c.store.put_console_session(stored)
        await self._c.store.trim_console_sessions(now, idle)
        grant = SessionGrant(
            record=stored, access=access_of(record), ends_at=min(expires_at, now + idle)
        )
        return session_id, grant

    async def resume(self, session_id: str, idle: float) -> SessionGrant:
        """The live session ``session_id`` names (noted as used): UnauthorizedError when it is
        unknown, logged out, idle ``idle`` seconds, expired, or its token no longer valid."""
        key = hash_session(session_id)
        found = await self._c.store.console_session(key)
        if found is None:
            raise UnauthorizedError(_ENDED)
        record, token = found
        now = self._c.now()
        if not record.live(now, idle):
            await self._c.store.delete_console_session(key)
            raise UnauthorizedError(_ENDED)
        check_live(token, now)
        # A console request is a use of its token, as an API request is: the tokens page's
        # "last use" stays true (written at most once a minute, like the session's own).
        if token.last_used_at is None or now - token.last_used_at >= TOUCH_EVERY:
            await self._c.store.touch_token(token.id, now)
        if now - record.last_seen_at >= TOUCH_EVERY:
            await self._c.store.touch_console_session(key, now)
            record = replace(record, last_seen_at=now)
        ends_at = min(record.expires_at, record.last_seen_at + idle)
        return SessionGrant(record=record, access=access_of(token), ends_at=ends_at)

    async def close(self, session_id: str) -> bool:
        """Log out: delete the session, so its id (and any copy of the cookie) stops working.
        True if there was one."""
        return await self._c.store.delete_console_session(hash_session(session_id))
