"""``/v1/connectors`` over real HTTP: create (201, then 200 for the same definition, 409 for
another), refusals naming the field, scopes and namespaces, pause, resume, stop, restart,
delete, dead records a page at a time, configs shown masked; and ``RemoteServices.connectors``
returning the records the local service returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cronbus.client import RemoteServices
from cronbus.connectors.records import Commit, NewDeadRecord
from cronbus.errors import ConflictError, ForbiddenError, InvalidArgumentError, NotFoundError
from cronbus.services import Services
from integration.test_api_support import Api, api, problem

__all__ = ["api"]


@pytest.fixture(autouse=True)
def allowed(api: Api, tmp_path: Path) -> None:
    """The operator lets connectors use the test's directory and the masked sink's database."""
    api.app.settings = api.app.settings.with_overrides(
        connector_files=(str(tmp_path),), connector_databases=("postgresql://127.0.0.1:5432/test",)
    )


def sink(name: str, path: Path) -> dict[str, Any]:
    """A ``file-sink`` connector of topic ``orders`` (nothing runs it: no worker here)."""
    return {"name": name, "kind": "file-sink", "config": {"topic": "orders", "path": str(path)}}


async def create(api: Api, body: dict[str, Any], status: int = 201) -> dict[str, Any]:
    response = await api.call("POST", "/v1/connectors", json=body)
    assert response.status_code == status, response.text
    assert response.headers["location"] == f"/v1/connectors/{body['name']}"
    view: dict[str, Any] = response.json()
    return view


def states(view: dict[str, Any]) -> list[str]:
    return [t["task"]["state"] for t in view["tasks"]]


async def test_create_is_idempotent_and_another_definition_conflicts(
    api: Api, tmp_path: Path
) -> None:
    body = sink("out", tmp_path / "out.jsonl")
    view = await create(api, body)
    spec = view["connector"]["spec"]
    assert (spec["kind"], spec["direction"], spec["topic"]) == ("file-sink", "sink", "orders")
    assert (view["created"], states(view), view["tasks"][0]["lag"]) == (True, ["unassigned"], 0)

    again = await create(api, body, status=200)
    assert again["created"] is False
    assert again["connector"] == view["connector"]
    other = {**body, "config": {"topic": "orders", "path": str(tmp_path / "elsewhere.jsonl")}}
    conflict = problem(await api.call("POST", "/v1/connectors", json=other), 409)
    assert "out" in conflict["detail"]
    problem(await api.call("POST", "/v1/connectors", json={**body, "max_tasks": 2}), 409)
    listed = (await api.call("GET", "/v1/connectors")).json()
    assert [v["connector"]["spec"]["name"] for v in listed["items"]] == ["out"]
    assert listed["next"] is None


async def test_a_retried_create_with_its_idempotency_key_gets_the_first_answer(
    api: Api, tmp_path: Path
) -> None:
    body = sink("keyed", tmp_path / "k.jsonl")
    headers = {"Idempotency-Key": "create-keyed-1"}
    first = await api.call("POST", "/v1/connectors", json=body, headers=headers)
    second = await api.call("POST", "/v1/connectors", json=body, headers=headers)

    assert (first.status_code, second.status_code) == (201, 201)
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json() == first.json()
    other = {**body, "name": "keyed2"}
    problem(await api.call("POST", "/v1/connectors", json=other, headers=headers), 409)


BAD: list[tuple[dict[str, Any], str]] = [
    ({"config": {"topic": "orders"}}, "config.path"),
    ({"config": {"topic": "orders", "path": "/tmp/x", "nope": 1}}, "config.nope"),
    ({"config": {"path": "/tmp/x"}}, "config.topic"),
    ({"config": {"topic": "bad topic", "path": "/tmp/x"}}, "config.topic"),
    ({"config": ["not", "an", "object"]}, "config"),
    ({"kind": "no-such-kind"}, "kind"),
    ({"kind": ""}, "kind"),
    ({"name": "bad name"}, "name"),
    ({"tolerance": "some"}, "tolerance"),
    ({"max_tasks": 0}, "max_tasks"),
    ({"max_tasks": 101}, "max_tasks"),
    ({"extra": True}, "extra"),
]


@pytest.mark.parametrize(("change", "field"), BAD, ids=[field for _, field in BAD])
async def test_a_bad_definition_is_refused_naming_the_field(
    api: Api, tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    body = {**sink("bad", tmp_path / "bad.jsonl"), **change}

    found = problem(await api.call("POST", "/v1/connectors", json=body), 422, field)

    assert found["detail"]
    assert (await api.call("GET", "/v1/connectors")).json()["items"] == []


async def test_a_read_token_reads_but_changes_nothing(api: Api, tmp_path: Path) -> None:
    await create(api, sink("out", tmp_path / "out.jsonl"))
    read = await api.headers("read")

    assert (await api.client.get("/v1/connectors/out", headers=read)).status_code == 200
    assert (await api.client.get("/v1/connectors", headers=read)).status_code == 200
    assert (await api.client.get("/v1/connectors/out/dead-records", headers=read)).is_success
    body = sink("mine", tmp_path / "mine.jsonl")
    problem(await api.client.post("/v1/connectors", json=body, headers=read), 403)
    for verb in ("pause", "resume", "stop", "restart"):
        problem(await api.client.post(f"/v1/connectors/out/{verb}", headers=read), 403)
    problem(await api.client.delete("/v1/connectors/out", headers=read), 403)
    shown = (await api.call("GET", "/v1/connectors/out")).json()
    assert states(shown) == ["unassigned"]


async def test_a_connector_of_another_namespace_is_not_found(api: Api, tmp_path: Path) -> None:
    await Services(api.app).namespaces.create("shop")
    shop = {"namespace": "shop"}
    response = await api.call(
        "POST", "/v1/connectors", json=sink("shop-out", tmp_path / "s.jsonl"), params=shop
    )
    assert response.status_code == 201, response.text
    assert response.json()["connector"]["spec"]["namespace"] == "shop"

    missing = problem(await api.call("GET", "/v1/connectors/shop-out"), 404)
    assert missing["detail"] == "no connector named 'shop-out'"
    for verb in ("pause", "resume", "stop", "restart"):
        problem(await api.call("POST", f"/v1/connectors/shop-out/{verb}"), 404)
    problem(await api.call("GET", "/v1/connectors/shop-out/dead-records"), 404)
    problem(await api.call("DELETE", "/v1/connectors/shop-out"), 404)
    assert (await api.call("GET", "/v1/connectors")).json()["items"] == []
    assert (await api.call("GET", "/v1/connectors/shop-out", params=shop)).status_code == 200
    listed = (await api.call("GET", "/v1/connectors", params=shop)).json()["items"]
    assert [v["connector"]["spec"]["name"] for v in listed] == ["shop-out"]


async def test_pause_resume_stop_restart_and_delete(api: Api, tmp_path: Path) -> None:
    await create(api, {**sink("out", tmp_path / "out.jsonl"), "max_tasks": 1})

    async def command(verb: str, **kwargs: Any) -> list[str]:
        response = await api.call("POST", f"/v1/connectors/out/{verb}", **kwargs)
        assert response.status_code == 200, response.text
        return states(response.json())

    assert await command("pause") == ["paused"]
    assert await command("resume") == ["unassigned"]
    assert await command("stop") == ["stopped"]
    assert await command("resume") == ["unassigned"]
    assert await command("restart") == ["unassigned"]
    assert await command("restart", json={"task": 0}) == ["unassigned"]
    assert await command("restart", json={}) == ["unassigned"]
    problem(await api.call("POST", "/v1/connectors/out/restart", json={"task": 1}), 422, "task")
    problem(await api.call("POST", "/v1/connectors/out/restart", json={"task": -1}), 422, "task")
    problem(await api.call("POST", "/v1/connectors/out/restart", json={"x": 1}), 422, "x")
    assert await command("pause") == ["paused"]

    deleted = await api.call("DELETE", "/v1/connectors/out")
    assert (deleted.status_code, deleted.content) == (204, b"")
    problem(await api.call("GET", "/v1/connectors/out"), 404)
    problem(await api.call("DELETE", "/v1/connectors/out"), 404)
    entries = (await api.call("GET", "/v1/audit")).json()["items"]
    actions = [e["action"] for e in entries if e["resource"] == "out"]
    assert actions == [
        "connectors.remove",
        "connectors.pause",
        "connectors.restart",
        "connectors.restart",
        "connectors.restart",
        "connectors.resume",
        "connectors.stop",
        "connectors.resume",
        "connectors.pause",
        "connectors.create",
    ]
    token_id = api.tokens["admin:*"].split("_")[1]
    assert {e["actor"] for e in entries if e["resource"] == "out"} == {token_id}


async def dead_records(api: Api, name: str, count: int) -> None:
    """``count`` dead records of ``name``'s task 0, committed as its worker would."""
    store = api.app.store
    now = api.app.clock.now()
    (lease,) = await store.acquire_connector_tasks("test-worker", now, 60.0, 1)
    dead = tuple(
        NewDeadRecord(record={"id": f"e{n}", "data": {"n": n}}, error=f"bad {n}", offset=n)
        for n in range(1, count + 1)
    )
    assert await store.commit_task(lease, Commit(dead=dead), now)


async def test_dead_records_newest_first_a_page_at_a_time(api: Api, tmp_path: Path) -> None:
    await create(api, {**sink("out", tmp_path / "out.jsonl"), "tolerance": "all"})
    await dead_records(api, "out", 3)

    first = await api.call("GET", "/v1/connectors/out/dead-records", params={"limit": 2})
    assert first.status_code == 200, first.text
    body = first.json()
    assert [r["offset"] for r in body["items"]] == [3, 2]
    assert body["items"][0]["error"] == "bad 3"
    assert body["items"][0]["record"] == {"id": "e3", "data": {"n": 3}}
    assert first.headers["link"] == f'<{body["next"]}>; rel="next"'
    rest = (await api.call("GET", body["next"])).json()
    assert ([r["offset"] for r in rest["items"]], rest["next"]) == ([1], None)
    problem(
        await api.call("GET", "/v1/connectors/out/dead-records", params={"cursor": "bm9wZQ"}),
        422,
        "cursor",
    )
    problem(await api.call("GET", "/v1/connectors/none/dead-records"), 404)
    shown = (await api.call("GET", "/v1/connectors/out")).json()
    assert (shown["tasks"][0]["task"]["state"], shown["tasks"][0]["task"]["holder"]) == (
        "running",
        "test-worker",
    )


async def test_configs_are_shown_masked(api: Api) -> None:
    url = "postgresql://app:s3cret@127.0.0.1:5432/test?sslmode=disable&password=other"
    body = {
        "name": "pg",
        "kind": "postgres-sink",
        "config": {"topic": "orders", "url": url, "table": "cronbus_api_test"},
    }
    created = await create(api, body)
    again = await create(api, body, status=200)  # the stored config is the real one

    shown = await api.call("GET", "/v1/connectors/pg")
    listed = await api.call("GET", "/v1/connectors")
    for text in (str(created), str(again), shown.text, listed.text):
        assert "s3cret" not in text
        assert "other" not in text
    masked = shown.json()["connector"]["spec"]["config"]["url"]
    assert masked.startswith("postgresql://***@127.0.0.1:5432/test?")
    assert shown.json()["connector"]["tasks"][0]["config"]["url"] == masked
    assert (await api.app.store.get_connector("pg")).spec.config["url"] == url


async def test_remote_services_return_the_local_records(api: Api, tmp_path: Path) -> None:
    local = Services(api.app).connectors
    async with RemoteServices(api.url, await api.token("write", ["default"])) as services:
        remote = services.connectors
        config = {"topic": "orders", "path": str(tmp_path / "o.jsonl")}
        made = await remote.create("out", "file-sink", config)
        again = await local.create("out", "file-sink", config)
        assert (made.created, again.created) == (True, False)
        assert (made.connector, made.tasks) == (again.connector, again.tasks)
        assert await remote.get("out") == await local.get("out")
        assert await remote.list() == await local.list()
        other = {"topic": "orders", "path": str(tmp_path / "other.jsonl")}
        with pytest.raises(ConflictError):
            await remote.create("out", "file-sink", other)
        with pytest.raises(InvalidArgumentError) as refused:
            await remote.create("bad", "file-sink", {"topic": "orders"})
        assert (refused.value.field, str(refused.value)) == ("config.path", "config.path: required")
        assert (await remote.pause("out")).state == "paused"
        assert (await remote.stop("out")).state == "stopped"
        assert (await remote.resume("out")).state == "unassigned"
        assert (await remote.restart("out", 0)).state == "unassigned"
        assert await remote.get("out") == await local.get("out")

        await dead_records(api, "out", 4)
        assert await remote.dead_records("out") == await local.dead_records("out")
        newest = await local.dead_records("out", 2)
        assert await remote.dead_records("out", 2) == newest
        older = await local.dead_records("out", 100, before=newest[-1].id)
        assert await remote.dead_records("out", 100, before=newest[-1].id) == older
        assert [r.offset for r in older] == [2, 1]
        with pytest.raises(InvalidArgumentError):
            await remote.dead_records("out", 0)

        await remote.remove("out")
        with pytest.raises(NotFoundError, match="no connector named 'out'"):
            await remote.get("out")
    async with RemoteServices(api.url, await api.token("read", ["default"])) as services:
        with pytest.raises(ForbiddenError):
            await services.connectors.pause("anything")
