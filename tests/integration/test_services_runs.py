"""The runs service on a real SQLite file: listing with filters and keyset pages, show with
attempts and waiting hints, cancel, retry and defer, access refusals and namespaces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App
from cronbus.errors import (
    ConflictError,
    ForbiddenError,
    InvalidArgumentError,
    NotFoundError,
    RunNotFoundError,
    UnknownTaskError,
)
from cronbus.services import LOCAL, Access, RunQuery, Scope, Services
from cronbus.services.pages import decode_cursor, encode_cursor
from cronbus.states import AttemptOutcome, RunState
from integration.test_services_fixtures import (
    OTHER,
    READER,
    STORES,
    WRITER,
    end_run,
    open_on,
)


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh SQLite file or PostgreSQL schema."""
    async with open_on(request, tmp_path) as app:
        yield app


@pytest.fixture
def services(opened: App) -> Services:
    """Local services (admin of every namespace) in ``default``."""
    return Services(opened, LOCAL)


async def test_defer_then_list_newest_first_in_pages(services: Services) -> None:
    ids = [(await services.runs.defer("add", [i, 1])).run.id for i in range(5)]
    first = await services.runs.list(limit=2)
    assert [r.id for r in first.items] == ids[::-1][:2]
    assert first.next is not None
    second = await services.runs.list(limit=2, cursor=first.next)
    assert [r.id for r in second.items] == ids[::-1][2:4]
    last = await services.runs.list(limit=2, cursor=second.next)
    assert [r.id for r in last.items] == [ids[0]]
    assert last.next is None


async def test_list_filters_by_state_task_and_queue(services: Services) -> None:
    a = (await services.runs.defer("add", [1, 2])).run
    s = (await services.runs.defer("send", ["x@y"])).run
    assert s.queue == "mail"
    by_task = await services.runs.list(RunQuery(task="add"))
    assert [r.id for r in by_task.items] == [a.id]
    by_queue = await services.runs.list(RunQuery(queue="mail"))
    assert [r.id for r in by_queue.items] == [s.id]
    await services.runs.cancel(a.id)
    cancelled = await services.runs.list(RunQuery(states=[RunState.CANCELLED]))
    assert [r.id for r in cancelled.items] == [a.id]


async def test_list_refuses_bad_input_naming_the_field(services: Services) -> None:
    cases = [
        ({"limit": 0}, "limit"),
        ({"limit": 251}, "limit"),
        ({"cursor": "not a cursor"}, "cursor"),
        ({"cursor": encode_cursor({"x": 1})}, "cursor"),
        ({"cursor": encode_cursor({"b": "1"})}, "cursor"),
        ({"query": RunQuery(states=["nope"])}, "states"),  # type: ignore[list-item]
        ({"query": RunQuery(queue="bad queue")}, "queue"),
        ({"query": RunQuery(task="")}, "task"),
        ({"query": RunQuery(created_after=float("nan"))}, "created_after"),
        ({"query": RunQuery(created_before=-5)}, "created_before"),
    ]
    for kwargs, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await services.runs.list(**kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field, kwargs


async def test_cursor_round_trip() -> None:
    assert decode_cursor(encode_cursor({"b": 12}), {"b": int}) == {"b": 12}
    with pytest.raises(InvalidArgumentError):
        decode_cursor(encode_cursor({"b": True}), {"b": int})


async def test_show_has_attempts_and_waiting_hint(services: Services, opened: App) -> None:
    run = (await services.runs.defer("add", [1, 2])).run
    detail = await services.runs.show(run.id)
    assert detail.run.id == run.id
    assert detail.attempts == []
    assert detail.waiting
    assert "no live worker serves queue 'default'" in detail.waiting[0]
    await end_run(opened, run.id, AttemptOutcome.FAILED)
    detail = await services.runs.show(run.id)
    assert detail.run.state is RunState.DEAD
    assert [a.outcome for a in detail.attempts] == [AttemptOutcome.FAILED]
    assert detail.waiting == []


async def test_unknown_run_is_not_found(services: Services) -> None:
    for call in (services.runs.show, services.runs.cancel, services.runs.retry):
        with pytest.raises(RunNotFoundError, match="no run has id 999"):
            await call(999)
    for bad in (0, 2**63, True):
        with pytest.raises(InvalidArgumentError) as caught:
            await services.runs.show(bad)
        assert caught.value.field == "run_id"
    with pytest.raises(InvalidArgumentError) as caught:
        await services.dead_letters.requeue([2**70])
    assert caught.value.field == "run_ids"


async def test_cancel_ended_run_is_a_conflict(services: Services, opened: App) -> None:
    run = (await services.runs.defer("add", [1, 2])).run
    assert (await services.runs.cancel(run.id)).state is RunState.CANCELLED
    with pytest.raises(ConflictError, match="already cancelled and cannot be cancelled"):
        await services.runs.cancel(run.id)


async def test_retry_dead_and_cancelled_only(services: Services, opened: App) -> None:
    run = (await services.runs.defer("add", [1, 2])).run
    with pytest.raises(ConflictError, match="only cancelled or dead runs can be retried"):
        await services.runs.retry(run.id)
    await end_run(opened, run.id, AttemptOutcome.FAILED)
    again = await services.runs.retry(run.id)
    assert again.state is RunState.QUEUED


async def test_defer_validates_each_field(services: Services) -> None:
    with pytest.raises(UnknownTaskError):
        await services.runs.defer("nope")
    cases = [
        ({"task": "add", "args": [1]}, "args"),
        ({"task": "add", "args": [1, 2], "queue": "a b"}, "queue"),
        ({"task": "add", "args": [1, 2], "priority": 10**9}, "priority"),
        ({"task": "add", "args": [1, 2], "delay": -1}, "delay"),
        ({"task": "add", "args": [1, 2], "eta": "soon"}, "eta"),
        ({"task": "add", "args": [1, 2], "idempotency_key": ""}, "idempotency_key"),
        ({"task": "add", "kwargs": {"a": 1, "c": 2}}, "kwargs"),
        ({"task": "add", "args": "12"}, "args"),
        ({"task": "a\x00"}, "task"),
    ]
    for kwargs, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await services.runs.defer(**kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field, kwargs
    assert (await services.runs.list()).items == []


async def test_defer_idempotency_key(services: Services) -> None:
    first = await services.runs.defer("add", [1, 2], idempotency_key="k1")
    again = await services.runs.defer("add", [1, 2], idempotency_key="k1")
    assert first.created
    assert not again.created
    assert again.run.id == first.run.id


async def test_read_scope_cannot_change(opened: App, services: Services) -> None:
    run = (await services.runs.defer("add", [1, 2])).run
    reader = Services(opened, READER)
    assert (await reader.runs.show(run.id)).run.id == run.id
    for change in (reader.runs.cancel(run.id), reader.runs.retry(run.id)):
        with pytest.raises(ForbiddenError, match="needs scope write"):
            await change
    with pytest.raises(ForbiddenError):
        await reader.runs.defer("add", [1, 2])
    assert (await services.runs.get(run.id)).state is RunState.QUEUED


async def test_namespace_outside_the_token_is_forbidden(opened: App) -> None:
    with pytest.raises(ForbiddenError, match="may not use namespace 'default'"):
        await Services(opened, OTHER, namespace="default").runs.list()
    with pytest.raises(ForbiddenError):
        await Services(opened, WRITER, namespace="other").runs.list()


async def test_run_of_another_namespace_is_not_found(opened: App, services: Services) -> None:
    run = (await services.runs.defer("add", [1, 2])).run
    other = Services(opened, OTHER, namespace="other")
    assert (await other.runs.list()).items == []
    for call in (other.runs.show, other.runs.cancel, other.runs.retry):
        with pytest.raises(NotFoundError):
            await call(run.id)
    mine = (await other.runs.defer("add", [3, 4])).run
    assert mine.namespace == "other"
    assert [r.id for r in (await services.runs.list()).items] == [run.id]


async def test_admin_of_some_namespaces_only(opened: App) -> None:
    limited = Access(actor="a", scope=Scope.ADMIN, namespaces=frozenset({"default"}))
    assert (await Services(opened, limited).runs.list()).items == []
    with pytest.raises(ForbiddenError):
        limited.require(Scope.ADMIN, None)


async def test_idempotency_key_of_another_namespace(opened: App, services: Services) -> None:
    mine = await services.runs.defer("add", [1, 2], idempotency_key="shared")
    other = Services(opened, OTHER, namespace="other")
    # Keys are unique per namespace: the other namespace gets a run of its own, and neither
    # sees the other's.
    theirs = await other.runs.defer("add", [1, 2], idempotency_key="shared")
    assert theirs.created
    assert theirs.run.id != mine.run.id
    assert theirs.run.namespace == "other"
    assert [r.id for r in (await other.runs.list()).items] == [theirs.run.id]
    assert [r.id for r in (await services.runs.list()).items] == [mine.run.id]


async def test_app_services_default_to_local_in_the_apps_namespace(opened: App) -> None:
    services = opened.services()
    assert services.namespace == opened.namespace
    assert services.access.scope is Scope.ADMIN
    shop = opened.services(READER, namespace="shop")
    with pytest.raises(ForbiddenError):
        await shop.runs.list()
