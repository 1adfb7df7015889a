"""An idempotency key is unique per namespace, through the Python API and the HTTP API, on each
store: a key that a run of namespace ``a`` holds makes a run of ``b``'s own in ``b`` (one ``b``
can fetch), says nothing of ``a``'s run, and a repeat in either returns that namespace's run.
The CLI's door is in ``acceptance/test_cli_idempotency_namespaces.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from cronbus import App, Call
from cronbus.services import Services
from cronbus.task import Task
from integration.test_api_support import Api, each_api

__all__ = ["each_api"]


def _add(a: int, b: int) -> int:
    return a + b


@pytest.fixture
async def apps(each_store_url: str) -> AsyncIterator[tuple[Task[..., int], Task[..., int]]]:
    """The task ``add`` of two apps on one store, in namespaces ``a`` and ``b``."""
    first, second = (
        App(store=each_store_url, namespace="a"),
        App(store=each_store_url, namespace="b"),
    )
    async with first, second:
        yield first.task(name="add")(_add), second.task(name="add")(_add)


async def test_defer_makes_a_run_per_namespace(apps: tuple[Task[..., int], Task[..., int]]) -> None:
    add_a, add_b = apps
    mine = await add_a.defer_async(1, 2, idempotency_key="k")
    theirs = await add_b.defer_async(1, 2, idempotency_key="k")
    assert mine.created
    assert theirs.created
    assert theirs.id != mine.id
    assert (await theirs.fetch_async()).namespace == "b"
    # A repeat in each namespace returns that namespace's run, through each way to defer.
    again_b = await add_b.using(idempotency_key="k").defer_async(1, 2)
    again_a = await add_a.defer_async(1, 2, idempotency_key="k")
    assert (again_b.id, again_b.created) == (theirs.id, False)
    assert (again_a.id, again_a.created) == (mine.id, False)


def test_blocking_defer_makes_a_run_per_namespace(each_store_url: str) -> None:
    first, second = (
        App(store=each_store_url, namespace="a"),
        App(store=each_store_url, namespace="b"),
    )
    add_a, add_b = first.task(name="add")(_add), second.task(name="add")(_add)
    with first, second:
        mine = add_a.defer(1, 2, idempotency_key="k")
        theirs = add_b.defer(1, 2, idempotency_key="k")
        assert theirs.created
        assert theirs.id != mine.id
        assert theirs.fetch().namespace == "b"
        assert add_b.using(idempotency_key="k").defer(1, 2).id == theirs.id
        (many,) = add_b.defer_many([Call.of(3, 4, idempotency_key="k")])
        assert (many.id, many.created) == (theirs.id, False)
        (held,) = add_b.defer_many([Call.of(3, 4, idempotency_key="k2")])
        (fresh,) = add_a.defer_many([Call.of(3, 4, idempotency_key="k2")])
        assert fresh.created
        assert fresh.id != held.id
        assert fresh.fetch().namespace == "a"


async def test_defer_many_makes_runs_per_namespace(
    apps: tuple[Task[..., int], Task[..., int]],
) -> None:
    add_a, add_b = apps
    held = await add_a.defer_many_async(
        [Call.of(1, 2, idempotency_key="k1"), Call.of(3, 4, idempotency_key="k2")]
    )
    # One batch in b: both keys a holds, one of them twice, and a run without a key.
    made = await add_b.defer_many_async(
        [
            Call.of(1, 2, idempotency_key="k1"),
            Call.of(3, 4, idempotency_key="k2"),
            Call.of(5, 6, idempotency_key="k1"),
            Call.of(7, 8),
        ]
    )
    assert [h.created for h in made] == [True, True, False, True]
    assert made[2].id == made[0].id
    assert not {h.id for h in made} & {h.id for h in held}
    for handle in made:
        assert (await handle.fetch_async()).namespace == "b"
    again = await add_a.defer_many_async([Call.of(1, 2, idempotency_key="k1")])
    assert [(h.id, h.created) for h in again] == [(held[0].id, False)]


async def test_http_defer_makes_a_run_per_namespace(each_api: Api) -> None:
    for name in ("a", "b"):
        await Services(each_api.app).namespaces.create(name)
    a, b = await each_api.headers("write", ["a"]), await each_api.headers("write", ["b"])
    body = {"task": "send", "args": ["x@y"], "idempotency_key": "k"}
    mine = await each_api.client.post("/v1/runs", json=body, headers=a)
    theirs = await each_api.client.post("/v1/runs", json=body, headers=b)
    assert (mine.status_code, theirs.status_code) == (201, 201), theirs.text
    run = theirs.json()["run"]
    assert run["namespace"] == "b"
    assert run["id"] != mine.json()["run"]["id"]
    shown = await each_api.client.get(f"/v1/runs/{run['id']}", headers=b)
    assert shown.status_code == 200, shown.text
    again = await each_api.client.post("/v1/runs", json=body, headers=b)
    assert (again.status_code, again.json()["run"]["id"]) == (200, run["id"])
    again_a = await each_api.client.post("/v1/runs", json=body, headers=a)
    assert (again_a.status_code, again_a.json()["run"]["id"]) == (200, mine.json()["run"]["id"])
