"""``Idempotency-Key`` on POSTs over real HTTP: a repeat gets the first answer and changes
nothing; the same key with another body is 409; keys are scoped by token and route."""

from __future__ import annotations

import asyncio

from integration.test_api_support import Api, api, problem

__all__ = ["api"]

BODY = {"task": "send", "args": ["a@x"]}


async def runs_in_store(api: Api) -> int:
    return sum((await api.app.store.count_runs()).values())


async def test_a_repeat_gets_the_first_answer(api: Api) -> None:
    key = {"Idempotency-Key": "4f1c-retry-1"}
    first = await api.call("POST", "/v1/runs", json=BODY, headers=key)
    assert first.status_code == 201
    assert "idempotent-replayed" not in first.headers
    again = await api.call("POST", "/v1/runs", json=BODY, headers=key)
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert await runs_in_store(api) == 1
    # Without a key, the same body is a new request.
    assert (await api.call("POST", "/v1/runs", json=BODY)).status_code == 201
    assert await runs_in_store(api) == 2


async def test_the_same_key_with_another_body_is_409(api: Api) -> None:
    key = {"Idempotency-Key": "k-1"}
    assert (await api.call("POST", "/v1/runs", json=BODY, headers=key)).status_code == 201
    other = {"task": "send", "args": ["b@x"]}
    clash = await api.call("POST", "/v1/runs", json=other, headers=key)
    assert "another request" in problem(clash, 409)["detail"]
    elsewhere = await api.call(
        "POST", "/v1/runs", json=BODY, headers={**key, "X-Cronbus-Namespace": "default"}
    )
    problem(elsewhere, 409)  # the namespace header is part of the request
    assert await runs_in_store(api) == 1


async def test_keys_are_scoped_by_token_and_route(api: Api) -> None:
    key = {"Idempotency-Key": "shared"}
    made = await api.call("POST", "/v1/runs", json=BODY, headers=key)
    run_id = made.json()["run"]["id"]
    # Another route with the same key is another request.
    cancelled = await api.call("POST", f"/v1/runs/{run_id}/cancel", headers=key)
    assert cancelled.status_code == 200
    assert "idempotent-replayed" not in cancelled.headers
    # Another token with the same key is another caller.
    write = await api.headers("write")
    theirs = await api.client.post("/v1/runs", json=BODY, headers={**write, **key})
    assert theirs.status_code == 201
    assert theirs.json()["run"]["id"] != run_id
    assert await runs_in_store(api) == 2


async def test_refusals_are_kept_too_and_failed_retries_do_not_apply_twice(api: Api) -> None:
    key = {"Idempotency-Key": "cancel-twice"}
    run_id = (await api.call("POST", "/v1/runs", json=BODY)).json()["run"]["id"]
    first = await api.call("POST", f"/v1/runs/{run_id}/cancel", headers=key)
    assert first.json()["state"] == "cancelled"
    # A retry of the cancel replays its answer instead of a 409 "already cancelled".
    again = await api.call("POST", f"/v1/runs/{run_id}/cancel", headers=key)
    assert again.status_code == 200
    assert again.json() == first.json()
    unknown = {"Idempotency-Key": "unknown-task"}
    missing = await api.call("POST", "/v1/runs", json={"task": "nope"}, headers=unknown)
    problem(missing, 404)
    replayed = await api.call("POST", "/v1/runs", json={"task": "nope"}, headers=unknown)
    assert replayed.headers["idempotent-replayed"] == "true"
    assert problem(replayed, 404) == missing.json()


async def test_concurrent_repeats_create_one_run(api: Api) -> None:
    headers = {**await api.headers(), "Idempotency-Key": "burst"}
    answers = await asyncio.gather(
        *(api.client.post("/v1/runs", json=BODY, headers=headers) for _ in range(8))
    )
    statuses = sorted(a.status_code for a in answers)
    # Each one either got the answer (201, first or replayed) or was told the first is
    # still in progress (409); never a second run.
    assert set(statuses) <= {201, 409}
    assert 201 in statuses
    assert await runs_in_store(api) == 1
    ids = {a.json()["run"]["id"] for a in answers if a.status_code == 201}
    assert len(ids) == 1


async def test_bad_keys_name_the_header(api: Api) -> None:
    for bad in (b"x" * 256, b"has space", "é".encode(), b""):
        response = await api.call("POST", "/v1/runs", json=BODY, headers={"Idempotency-Key": bad})
        problem(response, 422, "Idempotency-Key")
    assert await runs_in_store(api) == 0
