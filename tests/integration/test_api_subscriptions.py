"""``/v1/subscriptions`` over real HTTP: create (targets shown masked), read, list, change,
pause, resume, replay, delete; deliveries and a delivery with its attempts."""

from __future__ import annotations

from typing import Any

from integration.test_api_support import Api, api, problem

__all__ = ["api"]

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


async def subscribe(api: Api, name: str, **body: Any) -> dict[str, Any]:
    given = {"name": name, "topic": "orders", "task": "on_event", **body}
    response = await api.call("POST", "/v1/subscriptions", json=given)
    assert response.status_code == 201, response.text
    assert response.headers["location"] == f"/v1/subscriptions/{name}"
    view: dict[str, Any] = response.json()
    return view


async def test_create_read_change_pause_resume_delete(api: Api) -> None:
    view = await subscribe(api, "billing", types=["order.*"], max_attempts=3)
    spec = view["subscription"]["spec"]
    assert (spec["topic"], spec["target"]["kind"], spec["target"]["task"]) == (
        "orders",
        "task",
        "on_event",
    )
    assert spec["policy"]["max_attempts"] == 3
    assert view["state"] == "active"
    shown = (await api.call("GET", "/v1/subscriptions/billing")).json()
    assert shown["subscription"]["spec"] == spec
    changed = await api.call("PATCH", "/v1/subscriptions/billing", json={"max_attempts": 5})
    assert changed.json()["subscription"]["spec"]["policy"]["max_attempts"] == 5
    paused = await api.call("POST", "/v1/subscriptions/billing/pause")
    assert paused.json()["state"] == "paused"
    resumed = await api.call("POST", "/v1/subscriptions/billing/resume")
    assert resumed.json()["state"] == "active"
    deleted = await api.call("DELETE", "/v1/subscriptions/billing")
    assert deleted.status_code == 200
    problem(await api.call("GET", "/v1/subscriptions/billing"), 404)


async def test_webhook_secrets_never_leave(api: Api) -> None:
    view = await subscribe(
        api,
        "hook",
        task=None,
        webhook="https://user:pw@example.com/hook",
        secrets=[SECRET],
        headers={"X-Api-Key": "hunter2"},
    )
    listed = await api.call("GET", "/v1/subscriptions")
    for text in (str(view), listed.text, (await api.call("GET", "/v1/audit")).text):
        assert SECRET not in text
        assert "hunter2" not in text
        assert "pw@" not in text
    assert view["subscription"]["spec"]["target"]["secret_count"] == 1


async def test_replay_and_deliveries(api: Api) -> None:
    await subscribe(api, "replayer", start="earliest")
    for _ in range(3):
        await api.call("POST", "/v1/topics/orders/events", json={"type": "order.created"})
    replayed = await api.call("POST", "/v1/subscriptions/replayer/replay", json={"offset": 2})
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["subscription"]["subscription"]["cursor"] == 1
    assert replayed.json()["message"]
    problem(await api.call("POST", "/v1/subscriptions/replayer/replay", json={}), 422, "offset")
    deliveries = await api.call("GET", "/v1/subscriptions/replayer/deliveries")
    assert deliveries.json()["items"] == []  # no dispatcher ran: nothing was pushed yet
    problem(await api.call("GET", "/v1/deliveries/12345"), 404)
    bad = await api.call("GET", "/v1/subscriptions/replayer/deliveries", params={"state": "x"})
    problem(bad, 422, "state[0]")


async def test_refusals_name_the_field(api: Api) -> None:
    await subscribe(api, "taken")
    taken = await api.call(
        "POST", "/v1/subscriptions", json={"name": "taken", "topic": "other", "task": "on_event"}
    )
    problem(taken, 409)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "bad name", "topic": "t", "task": "on_event"}, "name"),
        ({"name": "n", "topic": "bad topic", "task": "on_event"}, "topic"),
        ({"name": "n", "topic": "t", "task": "on_event", "start": "middle"}, "start"),
        ({"name": "n", "topic": "t", "task": "on_event", "max_attempts": 0}, "max_attempts"),
        ({"name": "n", "topic": "t", "webhook": "ftp://x"}, "webhook"),
        ({"name": "n", "topic": "t", "task": "on_event", "nope": 1}, "nope"),
        ({"topic": "t", "task": "on_event"}, "name"),
    ]
    for body, field in cases:
        problem(await api.call("POST", "/v1/subscriptions", json=body), 422, field)
    problem(await api.call("PATCH", "/v1/subscriptions/taken", json={"topic": "x"}), 422, "topic")
    names = [
        v["subscription"]["spec"]["name"]
        for v in (await api.call("GET", "/v1/subscriptions")).json()["items"]
    ]
    assert names == ["taken"]
