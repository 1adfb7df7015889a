"""``/v1/runs`` over real HTTP: defer, list with filters and pages, show, cancel, retry, and
each refusal as a problem naming its field."""

from __future__ import annotations

from typing import Any

from integration.test_api_support import Api, api, problem

__all__ = ["api"]


async def defer(api: Api, **body: Any) -> dict[str, Any]:
    response = await api.call("POST", "/v1/runs", json={"task": "send", "args": ["a@x"], **body})
    assert response.status_code == 201, response.text
    assert response.headers["location"] == f"/v1/runs/{response.json()['run']['id']}"
    run: dict[str, Any] = response.json()["run"]
    return run


async def test_defer_then_show(api: Api) -> None:
    run = await defer(api, kwargs={"subject": "yo"}, priority=3)
    assert (run["task"], run["queue"], run["state"], run["priority"]) == (
        "send",
        "emails",
        "queued",
        3,
    )
    assert run["args"] == ["a@x"]
    assert run["kwargs"] == {"subject": "yo"}
    shown = await api.call("GET", f"/v1/runs/{run['id']}")
    assert shown.status_code == 200
    detail = shown.json()
    assert detail["run"]["id"] == run["id"]
    assert detail["attempts"] == []
    assert detail["children"] == []
    # No worker runs in this test: the run says why it waits.
    assert any("no live worker" in line for line in detail["waiting"])


async def test_defer_with_an_idempotency_key_returns_the_first_run(api: Api) -> None:
    first = await defer(api, idempotency_key="order-7")
    again = await api.call(
        "POST", "/v1/runs", json={"task": "send", "args": ["a@x"], "idempotency_key": "order-7"}
    )
    assert again.status_code == 200
    assert again.json() == {"run": again.json()["run"], "created": False}
    assert again.json()["run"]["id"] == first["id"]


async def test_pages_walk_every_run_exactly_once(api: Api) -> None:
    ids = [(await defer(api))["id"] for _ in range(7)]
    seen: list[int] = []
    link: str | None = "/v1/runs?limit=3&task=send"
    pages = 0
    while link is not None:
        response = await api.call("GET", link)
        assert response.status_code == 200, response.text
        body = response.json()
        seen += [run["id"] for run in body["items"]]
        if body["next"] is not None:
            assert response.headers["link"] == f'<{body["next"]}>; rel="next"'
            assert "task=send" in body["next"]
        link = body["next"]
        pages += 1
    assert seen == sorted(ids, reverse=True)  # newest first, each once
    assert pages == 3


async def test_filters(api: Api) -> None:
    kept = await defer(api)
    cancelled = await defer(api)
    assert (await api.call("POST", f"/v1/runs/{cancelled['id']}/cancel")).status_code == 200
    queued = await api.call("GET", "/v1/runs", params={"state": "queued"})
    assert [r["id"] for r in queued.json()["items"]] == [kept["id"]]
    both = await api.call("GET", "/v1/runs", params=[("state", "queued"), ("state", "cancelled")])
    assert len(both.json()["items"]) == 2
    none = await api.call("GET", "/v1/runs", params={"queue": "other"})
    assert none.json() == {"items": [], "next": None, "next_cursor": None}
    later = await api.call("GET", "/v1/runs", params={"created_after": kept["created_at"] + 3600})
    assert later.json()["items"] == []


async def test_cancel_and_retry(api: Api) -> None:
    run = await defer(api)
    cancelled = await api.call("POST", f"/v1/runs/{run['id']}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    again = await api.call("POST", f"/v1/runs/{run['id']}/cancel")
    assert "already cancelled" in problem(again, 409)["detail"]
    retried = await api.call("POST", f"/v1/runs/{run['id']}/retry")
    assert retried.status_code == 200
    assert retried.json()["state"] == "queued"
    twice = await api.call("POST", f"/v1/runs/{run['id']}/retry")
    problem(twice, 409)


async def test_refusals_name_the_field(api: Api) -> None:
    problem(await api.call("GET", "/v1/runs/999999"), 404)
    problem(await api.call("GET", "/v1/runs/0"), 422, "run_id")
    problem(await api.call("GET", f"/v1/runs/{2**64}"), 422, "run_id")
    problem(await api.call("GET", "/v1/runs/abc"), 422, "run_id")
    problem(await api.call("GET", "/v1/runs", params={"limit": 0}), 422, "limit")
    problem(await api.call("GET", "/v1/runs", params={"limit": 251}), 422, "limit")
    problem(await api.call("GET", "/v1/runs", params={"cursor": "nonsense"}), 422, "cursor")
    problem(await api.call("GET", "/v1/runs", params={"state": "nope"}), 422, "state[0]")
    problem(await api.call("GET", "/v1/runs", params={"created_after": "inf"}), 422)
    unknown = await api.call("POST", "/v1/runs", json={"task": "nope"})
    assert "nope" in problem(unknown, 404)["detail"]
    problem(await api.call("POST", "/v1/runs", json={"task": "send"}), 422, "args")
    problem(await api.call("POST", "/v1/runs", json={"task": "send", "bogus": 1}), 422, "bogus")
    problem(await api.call("POST", "/v1/runs", json={"args": []}), 422, "task")
    problem(await api.call("POST", "/v1/runs", json=[1, 2]), 422, "body")
    problem(await api.call("POST", "/v1/runs", content=b"{not json"), 422, "body")
    bad_queue = {"task": "send", "args": ["a"], "queue": "no spaces"}
    problem(await api.call("POST", "/v1/runs", json=bad_queue), 422, "queue")
    # Nothing was stored by any of them.
    assert (await api.call("GET", "/v1/runs")).json()["items"] == []
