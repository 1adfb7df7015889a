"""A fan-out parent and why runs wait, over real HTTP on SQLite and PostgreSQL: ``GET
/v1/runs/{id}`` shows a parent's counters, its first children and what it waits for;
``GET /v1/runs/{id}/children`` pages through every child once; ``GET /v1/workers/unknown-tasks``
names the tasks no live worker knows; the waiting reasons of routed and limited runs; and the
client's methods give the local services' records."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from cronbus import App
from cronbus.client import RemoteServices
from cronbus.model import (
    ClaimRequest,
    FanOut,
    FanOutKind,
    NewRun,
    QueueShare,
    WorkerInfo,
    WorkerState,
)
from cronbus.services import Services
from integration.test_api_support import Api, make_app, problem, served

SHARDS = 25


def distribution_app(url: str) -> App:
    """The API tests' app, plus tasks with a concurrency limit, labels and a hash route."""
    app = make_app(url)

    @app.task(name="one", concurrency=1)
    def one() -> None:
        return None

    @app.task(name="gpu", labels=["gpu"])
    def gpu() -> None:
        return None

    @app.task(name="routed", route="hash", route_key="key")
    def routed(key: str) -> None:
        return None

    return app


@pytest.fixture
async def api(each_store_url: str) -> AsyncIterator[Api]:
    """The app's API over real HTTP on each store in turn."""
    async with served(distribution_app(each_store_url)) as found:
        yield found


async def parent_of_shards(app: App, shards: int = SHARDS, namespace: str = "default") -> int:
    """A parent run of ``noop`` with ``shards`` children, made by the store's defer."""
    now = app.clock.now()
    new = NewRun(
        task="noop",
        queue="default",
        eta=now,
        namespace=namespace,
        fanout=FanOut(kind=FanOutKind.SHARDS, shards=shards),
    )
    (done,) = await app.store.defer([new], now)
    return done.id


async def register(
    app: App,
    worker_id: str,
    tasks: tuple[str, ...],
    labels: tuple[str, ...] = (),
    state: WorkerState = WorkerState.ALIVE,
) -> None:
    """A worker in the registry, beating now, serving every queue."""
    now = app.clock.now()
    await app.store.register_worker(
        WorkerInfo(
            id=worker_id,
            host="h",
            pid=1,
            queues=("*",),
            labels=labels,
            concurrency=4,
            version="t",
            started_at=now,
            heartbeat_at=now,
            state=state,
            tasks=tasks,
            lease_seconds=60.0,
        )
    )


async def walk(api: Api, link: str | None) -> tuple[list[dict[str, Any]], int]:
    """Every item of a listing from ``link`` on, by its next links, and the pages read."""
    items: list[dict[str, Any]] = []
    pages = 0
    while link is not None:
        response = await api.call("GET", link)
        assert response.status_code == 200, response.text
        body = response.json()
        items += body["items"]
        if body["next"] is not None:
            assert response.headers["link"] == f'<{body["next"]}>; rel="next"'
        link = body["next"]
        pages += 1
    return items, pages


async def test_a_parent_shows_its_counters_first_children_and_wait(api: Api) -> None:
    parent = await parent_of_shards(api.app)
    shown = await api.call("GET", f"/v1/runs/{parent}")
    assert shown.status_code == 200, shown.text
    detail = shown.json()
    assert detail["run"]["state"] == "waiting"
    assert detail["run"]["children"] == {
        "kind": "shards",
        "total": SHARDS,
        "ended": 0,
        "succeeded": 0,
        "reduce_run_id": None,
        "reduce_task": None,
        "note": "",
    }
    assert [c["child_index"] for c in detail["children"]] == list(range(20))
    assert detail["waiting"] == [f"waiting for children: 0 of {SHARDS} ended, 0 succeeded"]

    child = detail["children"][3]
    assert (child["parent_id"], child["shard_total"], child["state"]) == (parent, SHARDS, "queued")
    cancelled = await api.call("POST", f"/v1/runs/{child['id']}/cancel")
    assert cancelled.json()["state"] == "cancelled"
    again = (await api.call("GET", f"/v1/runs/{parent}")).json()
    assert again["run"]["children"]["ended"] == 1
    assert again["waiting"] == [f"waiting for children: 1 of {SHARDS} ended, 0 succeeded"]

    # A child waits for a worker like any run: none is alive here.
    shown_child = (await api.call("GET", f"/v1/runs/{detail['children'][0]['id']}")).json()
    assert shown_child["waiting"][0].startswith("no live worker serves queue 'default'")


async def test_children_pages_walk_every_child_once(api: Api) -> None:
    parent = await parent_of_shards(api.app)
    children, pages = await walk(api, f"/v1/runs/{parent}/children?limit=10")
    assert [c["child_index"] for c in children] == list(range(SHARDS))
    assert pages == 3
    assert {c["parent_id"] for c in children} == {parent}
    assert len({c["id"] for c in children}) == SHARDS

    rest, _ = await walk(api, f"/v1/runs/{parent}/children?after=19")
    assert [c["child_index"] for c in rest] == list(range(20, SHARDS))
    first, _ = await walk(api, f"/v1/runs/{parent}/children?after=-1&limit=250")
    assert [c["child_index"] for c in first] == list(range(SHARDS))

    # A run that is no parent has no children; a parent's child neither.
    lone = await api.call("POST", "/v1/runs", json={"task": "noop"})
    none = await api.call("GET", f"/v1/runs/{lone.json()['run']['id']}/children")
    assert none.json() == {"items": [], "next": None, "next_cursor": None}
    leaf = await api.call("GET", f"/v1/runs/{children[0]['id']}/children")
    assert leaf.json()["items"] == []


async def test_children_refusals_name_the_field(api: Api) -> None:
    parent = await parent_of_shards(api.app, 3)
    path = f"/v1/runs/{parent}/children"
    problem(await api.call("GET", path, params={"after": -2}), 422, "after")
    problem(await api.call("GET", path, params={"after": "x"}), 422, "after")
    problem(await api.call("GET", path, params={"limit": 0}), 422, "limit")
    problem(await api.call("GET", path, params={"limit": 251}), 422, "limit")
    problem(await api.call("GET", path, params={"cursor": "nonsense"}), 422, "cursor")
    page = (await api.call("GET", path, params={"limit": 1})).json()
    both = {"after": 0, "cursor": page["next_cursor"]}
    problem(await api.call("GET", path, params=both), 422, "cursor")
    problem(await api.call("GET", "/v1/runs/999999/children"), 404)
    problem(await api.call("GET", "/v1/runs/0/children"), 422, "run_id")
    # A run of another namespace is not found, never forbidden.
    await Services(api.app).namespaces.create("shop")
    other = await api.token("read", ["shop"])
    hidden = await api.client.get(path, headers={"Authorization": f"Bearer {other}"})
    problem(hidden, 404)


async def test_unknown_tasks_are_those_no_live_worker_knows(api: Api) -> None:
    services = Services(api.app)
    await services.runs.defer("noop")
    await services.runs.defer("send", ["a@x"])

    async def unknown() -> list[str]:
        response = await api.call("GET", "/v1/workers/unknown-tasks", scope="read")
        assert response.status_code == 200, response.text
        items: list[str] = response.json()["items"]
        return items

    assert await unknown() == ["noop", "send"]
    await register(api.app, "w-send", ("send",))
    assert await unknown() == ["noop"]
    await register(api.app, "w-noop", ("noop",), state=WorkerState.STOPPED)
    assert await unknown() == ["noop"]  # a stopped worker runs nothing
    await register(api.app, "w-noop", ("noop",))
    assert await unknown() == []


async def test_waiting_reasons_of_limited_labelled_and_routed_runs(api: Api) -> None:
    services = Services(api.app)
    await register(api.app, "w1", ("one", "gpu", "routed", "noop"))

    # Concurrency: one run of `one` runs (claimed as a worker does), the next one waits.
    first = (await services.runs.defer("one")).run
    second = (await services.runs.defer("one")).run
    request = ClaimRequest(
        worker_id="w1",
        queues=[QueueShare(name="default", limit=1)],
        limit=1,
        lease_seconds=60.0,
        tasks=["one"],
    )
    (claimed,) = await api.app.store.claim(request, api.app.clock.now())
    assert claimed.run_id == first.id
    detail = (await api.call("GET", f"/v1/runs/{second.id}")).json()
    assert detail["run"]["limit_key"] == "default:one"
    assert detail["waiting"] == ["at its concurrency limit (key default:one: 1 running of 1)"]

    # Labels no live worker carries.
    gpu = (await services.runs.defer("gpu")).run
    detail = (await api.call("GET", f"/v1/runs/{gpu.id}")).json()
    assert detail["run"]["route_labels"] == ["gpu"]
    assert detail["waiting"][0].startswith("needs labels gpu: no live worker")
    await register(api.app, "w2", ("gpu",), labels=("gpu",))
    assert (await api.call("GET", f"/v1/runs/{gpu.id}")).json()["waiting"] == []

    # A hash route pins the run to the one live worker that knows the task; gone, rerouted.
    routed = (await services.runs.defer("routed", ["acme"])).run
    assert (routed.route, routed.target_worker) == ("hash", "w1")
    detail = (await api.call("GET", f"/v1/runs/{routed.id}")).json()
    assert detail["waiting"] == ["pinned to worker w1 (route hash): only it claims the run"]
    await register(api.app, "w3", ("routed",))  # after the defer: w1 was the only choice
    await api.app.store.set_worker_state("w1", WorkerState.STOPPED, api.app.clock.now())
    (line,) = (await api.call("GET", f"/v1/runs/{routed.id}")).json()["waiting"]
    assert line.startswith(
        "waiting for worker w1, which is not alive (stopped): it will be rerouted (route hash)"
    )


async def test_the_client_gives_the_local_records(api: Api) -> None:
    parent = await parent_of_shards(api.app)
    await Services(api.app).runs.defer("send", ["a@x"])
    await register(api.app, "w1", ("noop",), labels=("gpu",))
    local = Services(api.app)
    async with RemoteServices(api.url, await api.token()) as remote:
        assert await remote.runs.show(parent) == await local.runs.show(parent)
        first = await remote.runs.children(parent, limit=10)
        assert first == await local.runs.children(parent, limit=10)
        second = await remote.runs.children(parent, limit=10, cursor=first.next)
        assert [c.child_index for c in second.items] == list(range(10, 20))
        after = await remote.runs.children(parent, after_index=21)
        assert after == await local.runs.children(parent, after_index=21)
        assert [c.child_index for c in after.items] == [22, 23, 24]
        assert await remote.workers.unknown_tasks() == ["send"]
        assert await remote.workers.unknown_tasks() == await local.workers.unknown_tasks()
        # The same worker records (their lists as tuples, as the store gives them).
        seen = [view.worker for view in await remote.workers.list()]
        assert seen == [view.worker for view in await local.workers.list()]
        assert seen[0].labels == ("gpu",)


async def test_a_parent_in_another_namespace_lists_its_own_children(api: Api) -> None:
    parent = await parent_of_shards(api.app, 2, namespace="shop")
    shop = Services(api.app, namespace="shop")
    page = await shop.runs.children(parent)
    assert [c.namespace for c in page.items] == ["shop", "shop"]
    await Services(api.app).namespaces.create("shop")
    token = await api.token("read", ["shop"])
    headers = {"Authorization": f"Bearer {token}", "X-Cronbus-Namespace": "shop"}
    listed = await api.client.get(f"/v1/runs/{parent}/children", headers=headers)
    assert [c["child_index"] for c in listed.json()["items"]] == [0, 1]


async def test_defer_makes_a_fan_out_parent(api: Api) -> None:
    made = await api.call("POST", "/v1/runs", json={"task": "noop", "shards": 3})
    assert made.status_code == 201, made.text
    parent = made.json()["run"]
    assert parent["state"] == "waiting"
    assert parent["children"]["kind"] == "shards"
    assert parent["children"]["total"] == 3
    listed = (await api.call("GET", f"/v1/runs/{parent['id']}/children")).json()["items"]
    assert [(c["child_index"], c["shard_total"]) for c in listed] == [(0, 3), (1, 3), (2, 3)]
    # Broadcast with no live worker that serves the task: it waits for one (broadcast_wait;
    # tests/integration/test_broadcast_wait.py follows it to its end).
    lonely = await api.call("POST", "/v1/runs", json={"task": "noop", "broadcast": True})
    assert lonely.status_code == 201, lonely.text
    assert lonely.json()["run"]["state"] == "waiting"
    assert lonely.json()["run"]["children"]["total"] == 0
    shown = (await api.call("GET", f"/v1/runs/{lonely.json()['run']['id']}")).json()
    assert shown["waiting"][0].startswith("waiting for a live worker that serves its task")
    problem(await api.call("POST", "/v1/runs", json={"task": "noop", "shards": 0}), 422, "shards")
    both = {"task": "noop", "shards": 2, "broadcast": True}
    problem(await api.call("POST", "/v1/runs", json=both), 422, "shards")
    problem(await api.call("POST", "/v1/runs", json={"task": "noop", "broadcast": []}), 422)
