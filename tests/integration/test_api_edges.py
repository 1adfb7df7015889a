"""Input a user can type never reaches the catch-all 500 handler: hostile paths, queries,
headers and bodies against every kind of endpoint, in process (httpx's ASGI transport raises
any error the app does not answer itself, so a bug fails the test loudly)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from cronbus import App
from cronbus.api import create_api
from integration.test_api_support import FAST, Api, local, problem

__all__ = ["local"]


def cursor(position: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(position).encode()).rstrip(b"=").decode()


HUGE = 10**30
PATHS = [
    "/v1/runs/%00",
    f"/v1/runs/{HUGE}",
    "/v1/runs/-1",
    "/v1/runs/1.5",
    "/v1/jobs/%00",
    "/v1/jobs/" + "j" * 5000,
    "/v1/jobs/%FF%FE",
    "/v1/jobs/a%2Fb",
    "/v1/jobs/../../etc/passwd",
    "/v1/subscriptions/%00",
    "/v1/subscriptions/" + "s" * 300,
    "/v1/topics/%00/events",
    "/v1/topics/" + "t" * 300 + "/events",
    f"/v1/deliveries/{HUGE}",
    f"/v1/operations/{HUGE}",
    "/v1/workers/%00",
    "/v1/workers/" + "w" * 300,
    "/v1/tokens/%00",
    "/v1/namespaces/%00",
]
QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/runs", {"limit": "abc"}),
    ("/v1/runs", {"limit": "1e3"}),
    ("/v1/runs", {"cursor": cursor({"b": HUGE})}),
    ("/v1/runs", {"cursor": cursor({"b": -HUGE})}),
    ("/v1/runs", {"cursor": cursor({"b": "x"})}),
    ("/v1/runs", {"cursor": cursor({"b": 1, "extra": 2})}),
    ("/v1/runs", {"cursor": "%%%"}),
    ("/v1/runs", {"created_after": "nan"}),
    ("/v1/runs", {"created_before": "1e308"}),
    ("/v1/runs", {"task": "\x00"}),
    ("/v1/runs", {"job": "\x00"}),
    ("/v1/runs", {"queue": "q" * 300}),
    ("/v1/jobs", {"cursor": cursor({"n": "\x00"})}),
    ("/v1/jobs", {"cursor": cursor({"n": HUGE})}),
    ("/v1/topics/orders/events", {"after": HUGE}),
    ("/v1/topics/orders/events", {"cursor": cursor({"o": HUGE})}),
    ("/v1/topics/orders/events", {"cursor": cursor({"o": -5})}),
    ("/v1/dead-letters", {"cursor": cursor({"r": HUGE, "d": HUGE})}),
    ("/v1/dead-letters", {"subscription": "\x00"}),
    ("/v1/subscriptions", {"topic": "\x00"}),
    ("/v1/subscriptions", {"cursor": cursor({"n": ""})}),
    ("/v1/audit", {"cursor": cursor({"b": HUGE})}),
    ("/v1/operations", {"cursor": cursor({"b": HUGE})}),
    ("/v1/stats/per-minute", {"window": HUGE}),
    ("/v1/jobs/x/next", {"count": HUGE}),
    ("/v1/workers", {"state": "\x00"}),
]
NUL = "\x00"
LONE = "\ud800"
BODIES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/runs", {"task": "send", "args": [NUL]}),
    ("POST", "/v1/runs", {"task": "send", "args": [LONE]}),
    ("POST", "/v1/runs", {"task": "send", "args": ["a"], "delay": 1e308}),
    ("POST", "/v1/runs", {"task": "send", "args": ["a"], "eta": -1e308}),
    ("POST", "/v1/runs", {"task": "send", "args": ["a"], "priority": HUGE}),
    ("POST", "/v1/runs", {"task": "send", "args": ["a"], "idempotency_key": NUL}),
    ("POST", "/v1/runs", {"task": "send", "args": ["x" * 3_000_000]}),
    ("POST", "/v1/runs", {"task": NUL}),
    ("POST", "/v1/runs", {"task": LONE}),
    ("POST", "/v1/jobs", {"name": NUL, "task": "noop", "every": 5}),
    ("POST", "/v1/jobs", {"name": "j", "task": "noop", "every": 1e308}),
    ("POST", "/v1/jobs", {"name": "j", "task": "noop", "cron": NUL}),
    ("POST", "/v1/jobs", {"name": "j", "task": "noop", "at": "9999-99-99"}),
    ("POST", "/v1/jobs", {"name": "j", "task": "noop", "at": HUGE}),
    ("POST", "/v1/jobs", {"name": "j", "task": "noop", "every": 5, "tz": NUL}),
    ("POST", "/v1/jobs", {"name": "j", "task": "noop", "every": 5, "max_fires": HUGE}),
    ("POST", "/v1/jobs", {"name": "j", "task": "noop", "every": 5, "calendars": [NUL]}),
    ("POST", "/v1/jobs", {"name": "j", "task": "noop", "every": 5, "start": HUGE}),
    ("POST", "/v1/topics/orders/events", {"type": "a.b", "data": LONE}),
    ("POST", "/v1/topics/orders/events", {"type": "a.b", "data": {LONE: 1}}),
    ("POST", "/v1/topics/orders/events", {"type": "a.b", "id": NUL}),
    ("POST", "/v1/topics/orders/events", {"type": "a.b", "time": 1e308}),
    ("POST", "/v1/topics/orders/events", {"type": "a.b", "source": LONE}),
    ("POST", "/v1/topics/orders/events", {"type": "a.b", "subject": NUL}),
    ("POST", "/v1/topics/orders/events", {"type": "a.b", "key": "k" * 5000}),
    ("POST", "/v1/topics/orders/events/batch", {"events": [{"type": "a.b"}] * 1001}),
    ("PUT", "/v1/topics/orders/retention", {"max_age": 1e308, "max_events": HUGE}),
    ("POST", "/v1/subscriptions", {"name": "s", "topic": "t", "webhook": NUL}),
    ("POST", "/v1/subscriptions", {"name": "s", "topic": "t", "webhook": "http://[::1"}),
    (
        "POST",
        "/v1/subscriptions",
        {"name": "s", "topic": "t", "task": "on_event", "headers": {NUL: "x"}},
    ),
    (
        "POST",
        "/v1/subscriptions",
        {"name": "s", "topic": "t", "task": "on_event", "data": {"a": LONE}},
    ),
    (
        "POST",
        "/v1/subscriptions",
        {"name": "s", "topic": "t", "task": "on_event", "filter": {"x": [1]}},
    ),
    (
        "POST",
        "/v1/subscriptions",
        {"name": "s", "topic": "t", "task": "on_event", "rate_limit": -1},
    ),
    ("POST", "/v1/subscriptions", {"name": "s", "topic": "t", "task": "on_event", "timeout": HUGE}),
    ("POST", "/v1/dead-letters/requeue", {"runs": [HUGE]}),
    ("POST", "/v1/dead-letters/purge", {"deliveries": [1, 2, 3], "subscription": NUL}),
    ("POST", "/v1/operations", {"kind": "runs.retry", "filter": {"states": [NUL]}}),
    ("POST", "/v1/operations", {"kind": "runs.retry", "filter": {"created_after": "x"}}),
    ("POST", "/v1/operations", {"kind": "subscriptions.replay", "ids": ["s"], "offset": HUGE}),
    ("POST", "/v1/operations", {"kind": "runs.cancel", "ids": [HUGE]}),
    ("POST", "/v1/tokens", {"name": NUL, "scope": "read"}),
    ("POST", "/v1/tokens", {"name": "t", "scope": "read", "expires_in": 1e308}),
    ("POST", "/v1/namespaces", {"name": NUL}),
]
RAW: list[tuple[str, str, bytes, str]] = [
    ("POST", "/v1/runs", b"\xff\xfe\x00", "application/json"),
    ("POST", "/v1/runs", b"[" * 100_000, "application/json"),
    ("POST", "/v1/runs", b'{"task": "send", "args": [NaN]}', "application/json"),
    ("POST", "/v1/runs", b'{"task": "send", "args": [1e999]}', "application/json"),
    ("POST", "/v1/runs", b"task=send", "application/x-www-form-urlencoded"),
    ("POST", "/v1/runs", b'{"task": "send"}', "text/plain"),
    ("POST", "/v1/runs", b"", "application/json"),
    ("PATCH", "/v1/jobs/x", b"null", "application/json"),
    ("POST", "/v1/topics/t/events/batch", b'{"events": {"type": "a"}}', "application/json"),
]


async def answer(api: Api, method: str, path: str, **kwargs: Any) -> int | str:
    """The status of a request, or the error the app failed with (which must not happen)."""
    try:
        response = await api.call(method, path, **kwargs)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return response.status_code


async def test_hostile_paths_and_queries_are_4xx(local: Api) -> None:
    await local.call("POST", "/v1/topics/orders/events", json={"type": "a.b"})
    wrong = []
    for path in PATHS:
        for method in ("GET", "POST", "DELETE"):
            status = await answer(local, method, path)
            if not isinstance(status, int) or not 400 <= status < 500:
                wrong.append((method, path[:60], status))
    for path, params in QUERIES:
        status = await answer(local, "GET", path, params=params)
        if not isinstance(status, int) or not (400 <= status < 500 or status == 200):
            wrong.append(("GET", path, params, status))
    assert not wrong, "\n".join(map(str, wrong))


async def test_hostile_bodies_are_4xx_and_store_nothing(local: Api) -> None:
    wrong = []
    for method, path, body in BODIES:
        # Lone surrogates travel as \\ud800 escapes, as a client sends them.
        raw = json.dumps(body).encode()
        status = await answer(
            local, method, path, content=raw, headers={"Content-Type": "application/json"}
        )
        if not isinstance(status, int) or not 400 <= status < 500:
            wrong.append((method, path, str(body)[:80], status))
    for method, path, raw, kind in RAW:
        status = await answer(local, method, path, content=raw, headers={"Content-Type": kind})
        if not isinstance(status, int) or not 400 <= status < 500:
            wrong.append((method, path, raw[:40], status))
    assert not wrong, "\n".join(map(str, wrong))
    assert (await local.call("GET", "/v1/runs")).json()["items"] == []
    assert (await local.call("GET", "/v1/jobs")).json()["items"] == []
    assert (await local.call("GET", "/v1/subscriptions")).json()["items"] == []


async def test_hostile_headers_are_4xx(local: Api) -> None:
    cases: list[dict[str, Any]] = [
        {"X-Cronbus-Namespace": b"\xff"},
        {"X-Cronbus-Namespace": "n" * 5000},
        {"Authorization": b"Bearer \xff\xfe"},
        {"Authorization": "Bearer " + "cb_" + "a" * 12 + "_" + "x" * 43},
        {"Idempotency-Key": b"\xff"},
    ]
    for extra in cases:
        headers = {**await local.headers(), **extra}
        response = await local.client.post("/v1/runs", json={"task": "noop"}, headers=headers)
        assert 400 <= response.status_code < 500, (extra, response.text)


async def test_the_catch_all_answers_a_problem(tmp_path: Any) -> None:
    """A bug (here a route that fails on purpose) is a logged 500 problem, never a traceback."""
    app = App(store=f"sqlite:///{tmp_path / 'api.db'}")
    api = create_api(app, FAST)

    @api.get("/v1/broken")
    async def broken() -> None:
        raise RuntimeError("a bug")

    transport = httpx.ASGITransport(app=api, raise_app_exceptions=False)
    async with app, httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        body = problem(await client.get("/v1/broken"), 500)
        assert "a bug" not in json.dumps(body)


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
async def test_every_method_on_every_documented_path_is_answered(local: Api, method: str) -> None:
    """Each path of the OpenAPI document, with placeholder parameters, under each method: a
    2xx, a 4xx problem, never an error of the app."""
    document = (await local.client.get("/openapi.json")).json()
    for template in document["paths"]:
        path = template.replace("{run_id}", "1").replace("{delivery_id}", "1")
        path = path.replace("{operation_id}", "1").replace("{", "").replace("}", "")
        response = await local.call(method, path, json={})
        assert response.status_code < 500, (method, path, response.text)
        if response.status_code >= 400:
            problem(response, response.status_code)
