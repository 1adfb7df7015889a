"""Payload matches nested deep, through the doors a user takes (issue 30, item 8): the console's
search box (``/runs?q=args.0:[[...]]``) and a bulk operation's ``filter.args`` over HTTP, on
both stores. A match nests at most as deep as a stored argument may (``MAX_DEPTH``, 100): every
depth up to it is matched (SQLite once built one nested SQL ``EXISTS`` per level, and its parser
overflowed from depth 8: a 503 blaming the store), and a deeper one is refused at the edge by
name (a 400 page, a 422 problem naming the field), never a 500."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from console.conftest import Console
from console.test_runs import rows
from cronbus.errors import InvalidArgumentError
from cronbus.serialization import MAX_DEPTH
from cronbus.services import RunQuery, Services
from integration.test_api_support import Api, make_app, problem, served, until

MATCHED = (5, 8, 50, MAX_DEPTH)
REFUSED = (MAX_DEPTH + 1, 1000)


def nested(depth: int) -> str:
    """JSON text of ``depth`` lists, one in another, around the number 1 (written as text:
    Python's own encoder cannot write a value 1000 levels deep)."""
    return "[" * depth + "1" + "]" * depth


@pytest.fixture
async def served_api(each_store_url: str) -> AsyncIterator[Api]:
    """The test app's API and console over real HTTP on each store in turn."""
    async with served(make_app(each_store_url)) as api:
        yield api


async def defer_nested(api: Api) -> dict[int, int]:
    """One run of ``send`` per matched depth, its first argument nested that deep."""
    services = Services(api.app)
    made = {}
    for depth in MATCHED:
        done = await services.runs.defer("send", [json.loads(nested(depth))], {})
        made[depth] = done.run.id
    return made


async def test_console_search_nested_deep(served_api: Api) -> None:
    made = await defer_nested(served_api)
    browser = await Console(api=served_api).login("read")
    try:
        for depth, run_id in made.items():
            page = await browser.get("/runs", params={"q": f"args.0:{nested(depth)} task:send"})
            assert page.status_code == 200, (depth, page.status_code, page.text[-2000:])
            assert rows(page.text) == [run_id], depth
        for depth in REFUSED:
            page = await browser.get("/runs", params={"q": f"args.0:{nested(depth)}"})
            assert page.status_code == 400, (depth, page.status_code, page.text[-2000:])
            assert f"nests more than {MAX_DEPTH} levels deep" in page.text, depth
    finally:
        await browser.close()


async def test_operation_filter_nested_deep(served_api: Api) -> None:
    made = await defer_nested(served_api)
    for depth in made:
        body = f'{{"kind":"runs.cancel","filter":{{"args":[["0",{nested(depth)}]]}}}}'
        started = await served_api.call(
            "POST", "/v1/operations", content=body, headers={"content-type": "application/json"}
        )
        assert started.status_code == 202, (depth, started.text[-2000:])
    for depth in REFUSED:
        body = f'{{"kind":"runs.cancel","filter":{{"args":[["0",{nested(depth)}]]}}}}'
        refused = await served_api.call(
            "POST", "/v1/operations", content=body, headers={"content-type": "application/json"}
        )
        found = problem(refused, 422)
        fields = [e["field"] for e in found["errors"]]
        assert any(f.startswith("filter.args") or f == "body" for f in fields), found
        assert f"more than {MAX_DEPTH} levels deep" in found["detail"], found

    # Each match found its run: the cancels ended every run, each matched at its own depth.
    async def cancelled() -> bool:
        got = await served_api.app.store.get_runs(list(made.values()))
        return all(r.state.value == "cancelled" for r in got)

    await until(cancelled, timeout=20.0)


async def test_python_api_refuses_a_match_too_deep_by_name(served_api: Api) -> None:
    # The services (the Python API's door, and the CLI's and the API's) check the bound
    # without recursing, so 5000 levels is a named error, not a RecursionError.
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    services = Services(served_api.app)
    with pytest.raises(InvalidArgumentError, match=f"nests more than {MAX_DEPTH} levels") as bad:
        await services.runs.list(RunQuery(args=[("0", deep)]))
    assert bad.value.field == "args"
    shallow = json.loads(nested(MAX_DEPTH))
    made = (await services.runs.defer("send", [shallow], {})).run.id
    page = await services.runs.list(RunQuery(args=[("0", shallow)]))
    assert [run.id for run in page.items] == [made]
