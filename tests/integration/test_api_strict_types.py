"""Strict types at the HTTP API's edge, over real HTTP on loopback, on SQLite and PostgreSQL:
a boolean or a numeric string where a number is expected is a 422 naming the field, and
nothing is stored or changed (a ``true`` priority is not 1, a ``true`` shards is not a fan-out
of one, a ``true`` replay offset does not rewind the cursor to the start). What JSON can only
carry as text stays accepted: ISO 8601 times and durations where a time or a duration is
expected, numbers written in a query string.

Every number, boolean and string field of every request body the OpenAPI document lists is
covered by ``test_api_strict_openapi.py``; these are the cases issue 30 reported, end to end.
"""

from __future__ import annotations

from typing import Any

import pytest

from integration.test_api_support import Api, each_api, problem

__all__ = ["each_api"]

NOT_NUMBERS: tuple[Any, ...] = (True, False, "1", "5", 1.5)
"""What a number field of a body refuses: booleans, numeric strings, fractions for ints."""


@pytest.fixture
def api(each_api: Api) -> Api:
    """The test app's API over real HTTP on each store in turn."""
    return each_api


async def runs_stored(api: Api) -> list[dict[str, Any]]:
    response = await api.call("GET", "/v1/runs")
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_a_boolean_or_numeric_string_priority_is_refused(api: Api) -> None:
    for bad in NOT_NUMBERS:
        body = {"task": "send", "args": ["a@x"], "priority": bad}
        problem(await api.call("POST", "/v1/runs", json=body), 422, "priority")
    assert await runs_stored(api) == []
    good = await api.call("POST", "/v1/runs", json={"task": "send", "args": ["a@x"], "priority": 3})
    assert good.status_code == 201, good.text
    assert good.json()["run"]["priority"] == 3


async def test_a_boolean_shards_makes_no_fan_out_parent(api: Api) -> None:
    for bad in NOT_NUMBERS:
        body = {"task": "noop", "shards": bad}
        problem(await api.call("POST", "/v1/runs", json=body), 422, "shards")
    # A job's shards too (the body derived from the job options record).
    job = {"name": "fan", "task": "noop", "every": 60, "shards": True}
    problem(await api.call("POST", "/v1/jobs", json=job), 422, "shards")
    assert await runs_stored(api) == []
    assert (await api.call("GET", "/v1/jobs")).json()["items"] == []


async def test_a_boolean_replay_offset_leaves_the_cursor_where_it_is(api: Api) -> None:
    for number in range(3):
        event = {"type": "order.created", "data": {"n": number}}
        published = await api.call("POST", "/v1/topics/orders/events", json=event)
        assert published.status_code == 201, published.text
    sub = {"name": "orders-in", "topic": "orders", "task": "on_event", "start": "latest"}
    created = await api.call("POST", "/v1/subscriptions", json=sub)
    assert created.status_code == 201, created.text
    cursor = created.json()["subscription"]["cursor"]
    assert cursor == 3  # "latest": past the three events
    for bad in NOT_NUMBERS:
        replay = await api.call("POST", "/v1/subscriptions/orders-in/replay", json={"offset": bad})
        problem(replay, 422, "offset")
        if not isinstance(bad, float):  # a fraction is a fine time: it would replay
            since = {"since": bad}
            replay = await api.call("POST", "/v1/subscriptions/orders-in/replay", json=since)
            problem(replay, 422, "since")
    shown = await api.call("GET", "/v1/subscriptions/orders-in")
    assert shown.json()["subscription"]["cursor"] == cursor
    # A bulk replay takes the same offset: refused the same way, no operation started.
    bulk = {"kind": "subscriptions.replay", "ids": ["orders-in"], "offset": True}
    problem(await api.call("POST", "/v1/operations", json=bulk), 422, "offset")
    assert (await api.call("GET", "/v1/operations")).json()["items"] == []
    # A real offset replays from there.
    done = await api.call("POST", "/v1/subscriptions/orders-in/replay", json={"offset": 2})
    assert done.status_code == 200, done.text
    assert done.json()["subscription"]["subscription"]["cursor"] == 1


async def test_times_and_durations_are_taken_as_iso_text_only(api: Api) -> None:
    at = {"name": "once", "task": "noop", "at": "2099-01-01T00:00:00Z"}
    created = await api.call("POST", "/v1/jobs", json=at)
    assert created.status_code == 201, created.text
    window = {
        "name": "window",
        "task": "noop",
        "every": "PT5M",
        "start": "2099-01-01T00:00:00+00:00",
        "end": "2099-02-01T00:00:00Z",
    }
    created = await api.call("POST", "/v1/jobs", json=window)
    assert created.status_code == 201, created.text
    trigger = created.json()["spec"]["trigger"]
    assert (trigger["seconds"], trigger["start"]) == (300.0, 4_070_908_800.0), trigger
    # A number stays a number of seconds (every) or epoch seconds (start).
    numbers = {"name": "numbers", "task": "noop", "every": 60, "start": 4_070_908_800}
    created = await api.call("POST", "/v1/jobs", json=numbers)
    assert created.status_code == 201, created.text
    # A boolean is neither, nor is a numeric string a time.
    for name, bad in (("every", True), ("every", "60"), ("start", True), ("start", "5")):
        body = {"name": f"bad-{name}", "task": "noop", "every": 60, name: bad}
        problem(await api.call("POST", "/v1/jobs", json=body), 422, name)
    for bad in (True, 5):
        problem(await api.call("POST", "/v1/jobs", json={"task": "noop", "name": bad}), 422, "name")


async def test_query_numbers_are_text_but_not_words(api: Api) -> None:
    ok = await api.call("GET", "/v1/runs", params={"limit": "5"})
    assert ok.status_code == 200, ok.text
    for bad in ("true", "false", "1.5", "five"):
        problem(await api.call("GET", "/v1/runs", params={"limit": bad}), 422, "limit")
        problem(await api.call("GET", "/v1/topics/t/events", params={"after": bad}), 422, "after")
    problem(await api.call("GET", "/v1/runs", params={"created_after": "true"}), 422)
    problem(await api.call("GET", "/v1/runs/true"), 422, "run_id")
