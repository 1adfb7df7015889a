"""``cronbus.client.RemoteServices`` against a real API on 127.0.0.1: the same records as the
local ``Services`` on the same store, the same pages, and the same errors (problem details back
into the cronbus error tree, with the server's message and the field at fault)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from cronbus.client import RemoteServices, ServerUnreachableError
from cronbus.errors import (
    ConflictError,
    ForbiddenError,
    InvalidArgumentError,
    NotFoundError,
    UnauthorizedError,
)
from cronbus.job_specs import JobOptions
from cronbus.services import EventInput, RunQuery, Services, SubscriptionInput
from cronbus.states import RunState
from integration.test_api_support import Api, api

__all__ = ["api"]


@pytest.fixture
async def remote(api: Api) -> AsyncIterator[RemoteServices]:
    """Remote services with an admin token of every namespace."""
    async with RemoteServices(api.url, await api.token()) as services:
        yield services


async def test_remote_records_are_the_local_records(api: Api, remote: RemoteServices) -> None:
    local = Services(api.app)
    deferred = await remote.runs.defer("send", ["ada"], queue="emails", priority=3)
    await local.runs.defer("noop")
    await remote.jobs.create("hourly", "noop", JobOptions(cron="0 * * * *", tz="Europe/Paris"))
    (published,) = await remote.topics.publish("orders", [EventInput(type="order.paid", data=1)])
    await remote.subscriptions.create(
        SubscriptionInput(name="mail", topic="orders", task="on_event", start="earliest")
    )

    assert deferred.created
    assert await local.runs.get(deferred.run.id) == deferred.run
    assert await remote.runs.list(RunQuery()) == await local.runs.list(RunQuery())
    assert await remote.runs.show(deferred.run.id) == await local.runs.show(deferred.run.id)
    assert await remote.jobs.get("hourly") == await local.jobs.get("hourly")
    assert await remote.jobs.next_fires("hourly", 3) == await local.jobs.next_fires("hourly", 3)
    assert await remote.topics.list() == await local.topics.list()
    assert (await remote.topics.read("orders")).items == [published.event]
    assert await remote.topics.read("orders") == await local.topics.read("orders")
    assert await remote.subscriptions.get("mail") == await local.subscriptions.get("mail")
    assert await remote.dead_letters.list() == await local.dead_letters.list()
    assert await remote.workers.list() == await local.workers.list()
    assert await remote.namespaces.list() == await local.namespaces.list()


async def test_pages_follow_the_server_cursor(api: Api, remote: RemoteServices) -> None:
    local = Services(api.app)
    for _ in range(3):
        await local.runs.defer("noop")

    first = await remote.runs.list(RunQuery(states=[RunState.QUEUED]), limit=2)
    second = await remote.runs.list(RunQuery(states=[RunState.QUEUED]), 2, first.next)

    assert first == await local.runs.list(RunQuery(states=[RunState.QUEUED]), limit=2)
    assert [run.id for run in first.items] == [3, 2]
    assert (second.next, [run.id for run in second.items]) == (None, [1])


async def test_errors_are_the_local_errors(api: Api, remote: RemoteServices) -> None:
    local = Services(api.app)
    queued = (await local.runs.defer("noop")).run

    for call in (lambda s: s.runs.show(999), lambda s: s.jobs.pause("nope")):
        with pytest.raises(NotFoundError) as found_remote:
            await call(remote)
        with pytest.raises(NotFoundError) as found_local:
            await call(local)
        assert str(found_remote.value) == str(found_local.value)
    with pytest.raises(ConflictError, match=f"run {queued.id} is queued"):
        await remote.runs.retry(queued.id)
    with pytest.raises(InvalidArgumentError) as invalid:
        await remote.runs.defer("send", [1, 2, 3, 4])
    assert invalid.value.field == "args"
    with pytest.raises(InvalidArgumentError) as invalid:
        await remote.runs.list(limit=0)
    assert invalid.value.field == "limit"


async def test_tokens_the_server_refuses(api: Api) -> None:
    reader = await api.token(scope="read", namespaces=["default"])

    async with RemoteServices(api.url, reader) as services:
        assert (await services.runs.list()).items == []
        with pytest.raises(ForbiddenError, match="scope"):
            await services.jobs.pause("nope")
        with pytest.raises(ForbiddenError):
            await services.tokens.list()
    async with RemoteServices(api.url, "cb_000000000000_nope") as services:
        with pytest.raises(UnauthorizedError):
            await services.runs.list()
    async with RemoteServices(api.url, None) as services:
        with pytest.raises(UnauthorizedError, match="token"):
            await services.runs.list()


async def test_tokens_made_remotely_work_and_are_revoked(api: Api, remote: RemoteServices) -> None:
    record, text = await remote.tokens.create("ci", "write", ["default"], expires_in=60)

    assert text.startswith(f"cb_{record.id}_")
    assert record.hash == ""
    assert record.id in [t.id for t in await remote.tokens.list()]
    async with RemoteServices(api.url, text, "default") as services:
        assert (await services.runs.defer("noop")).created
        await remote.tokens.revoke(record.id)
        with pytest.raises(UnauthorizedError):
            await services.runs.list()


async def test_a_server_that_is_not_there() -> None:
    async with RemoteServices("http://127.0.0.1:9", "x") as services:
        with pytest.raises(ServerUnreachableError, match="cannot reach"):
            await services.runs.list()
    with pytest.raises(InvalidArgumentError):
        RemoteServices("ftp://example.com", "x")
