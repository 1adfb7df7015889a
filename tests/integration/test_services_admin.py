"""Tokens, namespaces and the audit log through the services on a real SQLite file: a token is
shown once and stored hashed, authenticates to its access until revoked or expired; only
admins of every namespace manage tokens and namespaces; every change leaves an audit entry."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.clock import SystemClock
from cronbus.errors import (
    ConflictError,
    ForbiddenError,
    InvalidArgumentError,
    NotFoundError,
    UnauthorizedError,
)
from cronbus.job_specs import JobOptions
from cronbus.services import LOCAL, Access, Scope, Services
from integration.test_services_fixtures import READER, STORES, WRITER, open_on


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh SQLite file or PostgreSQL schema."""
    async with open_on(request, tmp_path) as app:
        yield app


@pytest.fixture
def services(opened: App) -> Services:
    """Local services in ``default``."""
    return Services(opened, LOCAL)


class Later(SystemClock):
    """A clock ``ahead`` seconds after the real one."""

    def __init__(self, ahead: float) -> None:
        self.ahead = ahead

    def now(self) -> float:
        """The real time, ``ahead`` seconds on."""
        return time.time() + self.ahead


async def test_token_is_shown_once_and_stored_hashed(services: Services, opened: App) -> None:
    await services.namespaces.create("shop")
    record, token = await services.tokens.create("ci", "write", ["shop"])
    assert token.startswith(f"cb_{record.id}_")
    assert record.hash == ""  # never shown
    stored = await opened.store.get_token(record.id)
    assert stored.hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in repr(stored)
    access = await services.tokens.authenticate(token)
    assert access.scope is Scope.WRITE
    assert access.namespaces == frozenset({"shop"})
    assert access.token_id == record.id
    assert [t.id for t in await services.tokens.list()] == [record.id]


async def test_authenticate_refuses_bad_tokens(services: Services, opened: App) -> None:
    record, token = await services.tokens.create("ci", "read", ["*"], expires_in=60)
    assert (await services.tokens.authenticate(token)).every_namespace
    for bad in (None, "", "Bearer x", token[:-1] + ("A" if token[-1] != "A" else "B")):
        with pytest.raises(UnauthorizedError):
            await services.tokens.authenticate(bad)
    clock = opened.clock
    opened.clock = Later(120)
    try:
        with pytest.raises(UnauthorizedError, match="expired"):
            await services.tokens.authenticate(token)
    finally:
        opened.clock = clock
    await services.tokens.revoke(record.id)
    with pytest.raises(UnauthorizedError, match="revoked"):
        await services.tokens.authenticate(token)


async def test_authenticate_notes_the_last_use_once_a_minute(
    services: Services, opened: App
) -> None:
    record, token = await services.tokens.create("ci", "read", ["*"])
    await services.tokens.authenticate(token)
    first = (await opened.store.get_token(record.id)).last_used_at
    assert first is not None
    await services.tokens.authenticate(token)
    assert (await opened.store.get_token(record.id)).last_used_at == first
    clock = opened.clock
    opened.clock = Later(61)
    try:
        await services.tokens.authenticate(token)
    finally:
        opened.clock = clock
    assert (await opened.store.get_token(record.id)).last_used_at > first + 60


async def test_token_refusals(services: Services, opened: App) -> None:
    cases = [
        (("", "read", ["default"]), "name"),
        (("n", "root", ["default"]), "scope"),
        (("n", "read", []), "namespaces"),
        (("n", "read", ["Bad NS"]), "namespaces"),
        (("n", "read", ["missing"]), "namespaces"),
        (("n", "read", ["*", "default"]), "namespaces"),
    ]
    for args, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await services.tokens.create(*args)
        assert caught.value.field == field, args
    with pytest.raises(InvalidArgumentError) as caught:
        await services.tokens.create("n", "read", ["default"], expires_in=0)
    assert caught.value.field == "expires_in"
    with pytest.raises(InvalidArgumentError):
        await services.tokens.revoke("zz")
    with pytest.raises(NotFoundError):
        await services.tokens.revoke("0123456789ab")


async def test_only_admins_of_every_namespace_manage(opened: App) -> None:
    limited_admin = Access(actor="a", scope=Scope.ADMIN, namespaces=frozenset({"default"}))
    for access in (READER, WRITER, limited_admin):
        services = Services(opened, access)
        with pytest.raises(ForbiddenError):
            await services.tokens.create("x", "read", ["default"])
        with pytest.raises(ForbiddenError):
            await services.tokens.list()
        with pytest.raises(ForbiddenError):
            await services.namespaces.create("x")
        with pytest.raises(ForbiddenError):
            await services.namespaces.delete("default")
    assert [n.name for n in await Services(opened, READER).namespaces.list()] == ["default"]


async def test_namespaces_life(services: Services, opened: App) -> None:
    created = await services.namespaces.create("shop")
    assert created.name == "shop"
    with pytest.raises(ConflictError):
        await services.namespaces.create("shop")
    with pytest.raises(InvalidArgumentError) as caught:
        await services.namespaces.create("Shop!")
    assert caught.value.field == "name"
    shop = Services(opened, LOCAL, namespace="shop")
    await shop.jobs.create("j", "add", JobOptions(every=60, args=[1, 2]))
    with pytest.raises(ConflictError):
        await services.namespaces.delete("shop")  # a job lives in it
    await shop.jobs.delete("j")
    await services.namespaces.delete("shop")
    with pytest.raises(ConflictError):
        await services.namespaces.delete("default")
    assert [n.name for n in await services.namespaces.list()] == ["default"]
    with pytest.raises(NotFoundError):
        await Services(opened, READER).namespaces.get("shop")


async def test_every_change_is_audited(services: Services, opened: App) -> None:
    await services.namespaces.create("shop")
    record, _ = await services.tokens.create("ci", "write", ["shop"])
    shop = Services(opened, Access.of("ci", "write", ["shop"], token_id=record.id), "shop")
    run = (await shop.runs.defer("add", [1, 2])).run
    await shop.runs.cancel(run.id)
    everything = await services.audit.list()
    actions = [(e.action, e.actor, e.namespace) for e in everything.items]
    assert actions == [
        ("runs.cancel", record.id, "shop"),
        ("runs.defer", record.id, "shop"),
        ("tokens.create", "local", None),
        ("namespaces.create", "local", None),
    ]
    theirs = await shop.audit.list(limit=1)
    assert [e.action for e in theirs.items] == ["runs.cancel"]
    rest = await shop.audit.list(limit=1, cursor=theirs.next)
    assert [e.action for e in rest.items] == ["runs.defer"]
    assert rest.next is None
    with pytest.raises(ForbiddenError):
        await shop.audit.list(namespace="default")
