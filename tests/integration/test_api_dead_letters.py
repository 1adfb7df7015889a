"""``/v1/dead-letters`` over real HTTP: dead runs listed with their error, requeued and purged
by id or all at once; ids that are not dead are refused with why."""

from __future__ import annotations

from cronbus.testing import run_until_idle_async
from integration.test_api_support import Api, api, problem

__all__ = ["api"]


async def dead_runs(api: Api, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        response = await api.call("POST", "/v1/runs", json={"task": "boom"})
        ids.append(response.json()["run"]["id"])
    await run_until_idle_async(api.app, raise_errors=False)
    return ids


async def test_list_requeue_purge(api: Api) -> None:
    ids = await dead_runs(api, 3)
    listed = await api.call("GET", "/v1/dead-letters", params={"limit": 2})
    assert listed.status_code == 200, listed.text
    first = listed.json()
    assert [d["id"] for d in first["items"]] == [ids[2], ids[1]]
    assert first["items"][0]["kind"] == "run"
    assert first["items"][0]["run"]["error"]["message"] == "boom"
    rest = (await api.call("GET", first["next"])).json()
    assert [d["id"] for d in rest["items"]] == [ids[0]]
    assert rest["next"] is None
    queued = await api.call("POST", "/v1/runs", json={"task": "noop"})
    requeued = await api.call(
        "POST",
        "/v1/dead-letters/requeue",
        json={"runs": [ids[0], queued.json()["run"]["id"]]},
    )
    assert requeued.status_code == 200, requeued.text
    assert requeued.json()["runs"] == [ids[0]]
    assert len(requeued.json()["refused"]) == 1
    state = (await api.call("GET", f"/v1/runs/{ids[0]}")).json()["run"]["state"]
    assert state == "queued"
    purged = await api.call("POST", "/v1/dead-letters/purge", json={"all_runs": True})
    assert sorted(purged.json()["runs"]) == sorted(ids[1:])
    problem(await api.call("GET", f"/v1/runs/{ids[1]}"), 404)
    remaining = (await api.call("GET", "/v1/dead-letters", params={"kind": "runs"})).json()
    assert remaining["items"] == []


async def test_refusals(api: Api) -> None:
    problem(await api.call("GET", "/v1/dead-letters", params={"kind": "jobs"}), 422, "kind")
    problem(await api.call("GET", "/v1/dead-letters", params={"cursor": "e30"}), 422, "cursor")
    problem(await api.call("POST", "/v1/dead-letters/requeue", json={"runs": [0]}), 422, "runs[0]")
    problem(await api.call("POST", "/v1/dead-letters/purge", json={"runz": [1]}), 422, "runz")
    missing = await api.call("GET", "/v1/dead-letters", params={"subscription": "nope"})
    problem(missing, 404)
    read = await api.headers("read")
    refused = await api.client.post("/v1/dead-letters/purge", json={"all_runs": True}, headers=read)
    problem(refused, 403)
