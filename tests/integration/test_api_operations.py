"""``/v1/operations``, ``/v1/stats`` and ``/v1/audit`` over real HTTP: a bulk retry by filter
answered 202 and polled to its end; counts by state; every change in the audit log."""

from __future__ import annotations

from typing import Any

from cronbus.testing import run_until_idle_async
from integration.test_api_support import Api, api, each_api, problem, until

__all__ = ["api", "each_api"]


async def test_bulk_retry_by_filter_then_by_ids(each_api: Api) -> None:
    api = each_api  # on both stores: a refused item is counted by each store's operation
    for _ in range(3):
        await api.call("POST", "/v1/runs", json={"task": "boom"})
    await run_until_idle_async(api.app, raise_errors=False)
    started = await api.call(
        "POST", "/v1/operations", json={"kind": "runs.retry", "filter": {"states": ["dead"]}}
    )
    assert started.status_code == 202, started.text
    op = started.json()
    assert started.headers["location"] == f"/v1/operations/{op['id']}"
    final: dict[str, Any] = {}

    async def ended() -> bool:
        final.update((await api.call("GET", started.headers["location"])).json())
        return final["state"] in ("succeeded", "failed", "aborted")

    await until(ended)
    assert (final["state"], final["total"], final["done"], final["failed"]) == (
        "succeeded",
        3,
        3,
        0,
    )
    queued = await api.call("GET", "/v1/runs", params={"state": "queued"})
    assert len(queued.json()["items"]) == 3
    ids = [run["id"] for run in queued.json()["items"]]
    cancel = await api.call("POST", "/v1/operations", json={"kind": "runs.cancel", "ids": ids})
    assert cancel.status_code == 202

    async def cancelled() -> bool:
        body = (await api.call("GET", "/v1/runs", params={"state": "cancelled"})).json()
        return len(body["items"]) == 3

    await until(cancelled)
    listed = (await api.call("GET", "/v1/operations")).json()["items"]
    assert [o["kind"] for o in listed] == ["runs.cancel", "runs.retry"]
    # Aborting an operation that ended returns it as it is.
    aborted = await api.call("POST", f"/v1/operations/{op['id']}/abort")
    assert aborted.json()["state"] == "succeeded"
    # Issue 30: an operation whose every item is refused (the runs ended already) ends failed.
    again = await api.call("POST", "/v1/operations", json={"kind": "runs.cancel", "ids": ids})
    assert again.status_code == 202
    final.clear()
    started = again

    async def refused() -> bool:
        final.update((await api.call("GET", f"/v1/operations/{again.json()['id']}")).json())
        return final["state"] in ("succeeded", "failed", "aborted")

    await until(refused)
    assert (final["state"], final["done"], final["failed"]) == ("failed", 0, 3), final
    assert final["error"], final


async def test_operation_refusals(api: Api) -> None:
    problem(await api.call("POST", "/v1/operations", json={"kind": "runs.delete"}), 422, "kind")
    problem(await api.call("POST", "/v1/operations", json={"ids": [1]}), 422, "kind")
    bad_filter = {"kind": "runs.retry", "filter": {"colour": "red"}}
    problem(await api.call("POST", "/v1/operations", json=bad_filter), 422)
    problem(await api.call("GET", "/v1/operations/999"), 404)
    problem(await api.call("GET", "/v1/operations/0"), 422, "operation_id")
    read = await api.headers("read")
    refused = await api.client.post(
        "/v1/operations", json={"kind": "runs.retry", "ids": [1]}, headers=read
    )
    problem(refused, 403)
    assert (await api.call("GET", "/v1/operations")).json()["items"] == []


async def test_stats_and_audit(api: Api) -> None:
    run = (await api.call("POST", "/v1/runs", json={"task": "noop"})).json()["run"]
    await api.call("POST", f"/v1/runs/{run['id']}/cancel")
    stats = (await api.call("GET", "/v1/stats")).json()
    assert stats["counts"]["cancelled"] == 1
    assert stats["total"] == 1
    per_minute = await api.call("GET", "/v1/stats/per-minute", params={"window": 600})
    assert per_minute.status_code == 200
    buckets = per_minute.json()["buckets"]
    assert sum(b["total"] for b in buckets) == 1
    problem(await api.call("GET", "/v1/stats/per-minute", params={"window": 10}), 422, "window")
    entries = (await api.call("GET", "/v1/audit")).json()["items"]
    actions = [e["action"] for e in entries]
    assert actions[:2] == ["runs.cancel", "runs.defer"]
    token_id = api.tokens["admin:*"].split("_")[1]
    assert entries[0]["actor"] == token_id
    assert entries[0]["resource"] == str(run["id"])
    walked: list[int] = []
    link: str | None = "/v1/audit?limit=1"
    while link is not None:
        body = (await api.call("GET", link)).json()
        walked += [e["id"] for e in body["items"]]
        link = body["next"]
    assert walked == [e["id"] for e in entries]
    # A token of one namespace reads only that namespace's changes.
    await api.call("POST", "/v1/namespaces", json={"name": "shop"})
    shop = await api.headers("read", ["shop"])
    assert (await api.client.get("/v1/audit", headers=shop)).json()["items"] == []
