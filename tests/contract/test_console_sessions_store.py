"""The store contract for console sessions (both stores): stored by hash with their token,
touched at most once a minute, deleted at logout, trimmed when they end, and gone when their
token is revoked."""

from __future__ import annotations

import pytest

from cronbus.admin_records import ConsoleSession
from cronbus.errors import ConflictError, NotFoundError
from cronbus.store import Store

from .test_admin import T0, token


def session(n: int = 1, token_id: str | None = None, **kw: float) -> ConsoleSession:
    fields: dict[str, object] = {
        "hash": f"{n:064x}",
        "token_id": token_id or token(1).id,
        "created_at": T0,
        "last_seen_at": T0,
        "expires_at": T0 + 3600,
    }
    fields.update(kw)
    return ConsoleSession(**fields)  # type: ignore[arg-type]


async def test_a_session_is_found_by_hash_with_its_token(store: Store) -> None:
    await store.put_token(token(1))
    await store.put_console_session(session(1))
    found = await store.console_session(session(1).hash)
    assert found is not None
    assert found[0] == session(1)
    assert found[1] == await store.get_token(token(1).id)
    assert await store.console_session("f" * 64) is None


async def test_a_session_needs_a_live_token_and_a_fresh_hash(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.put_console_session(session(1))
    await store.put_token(token(1))
    await store.put_console_session(session(1))
    with pytest.raises(ConflictError):
        await store.put_console_session(session(1))
    await store.put_token(token(2))
    await store.revoke_token(token(2).id, T0)
    with pytest.raises(NotFoundError):
        await store.put_console_session(session(2, token_id=token(2).id))


async def test_touching_writes_at_most_once_a_minute(store: Store) -> None:
    await store.put_token(token(1))
    await store.put_console_session(session(1))
    await store.touch_console_session(session(1).hash, T0 + 30)
    found = await store.console_session(session(1).hash)
    assert found is not None
    assert found[0].last_seen_at == T0
    await store.touch_console_session(session(1).hash, T0 + 90)
    found = await store.console_session(session(1).hash)
    assert found is not None
    assert found[0].last_seen_at == T0 + 90


async def test_logout_deletes_the_session(store: Store) -> None:
    await store.put_token(token(1))
    await store.put_console_session(session(1))
    await store.put_console_session(session(2))
    assert await store.delete_console_session(session(1).hash)
    assert not await store.delete_console_session(session(1).hash)
    assert await store.console_session(session(1).hash) is None
    assert await store.console_session(session(2).hash) is not None


async def test_revoking_a_token_deletes_its_sessions_only(store: Store) -> None:
    await store.put_token(token(1))
    await store.put_token(token(2))
    await store.put_console_session(session(1))
    await store.put_console_session(session(2, token_id=token(2).id))
    await store.revoke_token(token(1).id, T0 + 10)
    assert await store.console_session(session(1).hash) is None
    assert await store.console_session(session(2).hash) is not None


async def test_trim_deletes_expired_and_idle_sessions(store: Store) -> None:
    await store.put_token(token(1))
    await store.put_console_session(session(1, expires_at=T0 + 100))  # expired at T0 + 200
    await store.put_console_session(session(2, last_seen_at=T0 + 50))  # idle 150 s
    await store.put_console_session(session(3, last_seen_at=T0 + 150))  # idle 50 s: kept
    assert await store.trim_console_sessions(T0 + 200, idle=100) == 2
    assert await store.console_session(session(1).hash) is None
    assert await store.console_session(session(2).hash) is None
    assert await store.console_session(session(3).hash) is not None
