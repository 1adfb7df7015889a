"""The figures every door shows of a run (issue 30 item 12), over real HTTP and the console's
pages on each store: a map-reduce parent's result is its reduce run's; a run retried by hand
counts its tries against its budget coherently (never "2 of 1"); the console's runs table says
how long a run took from its start, and which worker ran its last attempt."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from console.conftest import Console
from cronbus import App, RunContext
from cronbus.handle import RunHandle
from cronbus.testing import FakeClock, run_until_idle_async
from integration.test_api_support import Api, served, until


def figures_app(url: str, clock: FakeClock | None = None) -> App:
    """An app with a map-reduce, a task that fails once, and one that does nothing."""
    app = App(store=url, clock=clock)

    @app.task(name="ident")
    def ident(n: int) -> int:
        return n

    @app.task(name="total")
    def total(results: list[int]) -> int:
        return sum(results)

    @app.task(name="sum_up")
    def sum_up(n: int, ctx: RunContext) -> str:
        return f"mapped {ctx.map(ident, range(n), reduce=total)}"

    @app.task(name="hidden_total", redact=True)
    def hidden_total(results: list[int]) -> int:
        return sum(results)

    @app.task(name="sum_hidden")
    def sum_hidden(n: int, ctx: RunContext) -> str:
        return f"mapped {ctx.map(ident, range(n), reduce=hidden_total)}"

    @app.task(name="fails_once", retries=0)
    def fails_once(flag: str) -> str:
        if not Path(flag).exists():
            Path(flag).touch()
            raise RuntimeError("first time")
        return "second time"

    @app.task(name="noop")
    def noop() -> None:
        return None

    return app


@pytest.fixture
async def api(each_store_url: str) -> AsyncIterator[Api]:
    """The figures app's API and console on each store."""
    async with served(figures_app(each_store_url)) as found:
        yield found


@pytest.fixture
async def timed(each_store_url: str) -> AsyncIterator[tuple[Api, FakeClock]]:
    """The same on a fake clock, so that a run can wait a known time before it starts."""
    clock = FakeClock()
    async with served(figures_app(each_store_url, clock)) as found:
        yield found, clock


async def page(api: Api, path: str) -> str:
    """A console page as a logged-in reader sees it."""
    browser = await Console(api).login("read")
    try:
        response = await browser.get(path)
        assert response.status_code == 200, response.text
        return response.text
    finally:
        await browser.close()


async def cli(url: str, *args: str) -> str:
    """``cronbus ARGS --store URL`` run as a user would; its output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cronbus",
        *args,
        "--store",
        url,
        env={k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


def row_of(html: str, run_id: int) -> str:
    """The runs table's row of ``run_id``."""
    start = html.index(f'<tr data-run="{run_id}">')
    return html[start : html.index("</tr>", start)]


def cells(row: str) -> list[str]:
    """The text of each cell of a table row."""
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]


async def test_a_map_reduce_parent_shows_its_reduce_result_at_every_door(
    api: Api, each_store_url: str
) -> None:
    created = await api.call("POST", "/v1/runs", json={"task": "sum_up", "args": [4]})
    assert created.status_code in (200, 201), created.text
    parent = created.json()["run"]["id"]
    await run_until_idle_async(api.app)
    shown = (await api.call("GET", f"/v1/runs/{parent}")).json()["run"]
    assert (shown["state"], shown["result"]) == ("succeeded", 6)
    listed = (await api.call("GET", "/v1/runs", params={"task": "sum_up"})).json()["items"]
    assert [(r["id"], r["result"]) for r in listed] == [(parent, 6)]
    assert await RunHandle(api.app, parent).result_async() == 6
    html = await page(api, f"/runs/{parent}")
    result = html[html.index('id="run-result"') :]
    assert result[: result.index("</")].endswith("6")
    shown_json = json.loads(await cli(each_store_url, "runs", "show", str(parent), "--json"))
    assert shown_json["result"] == 6


async def test_a_parent_hides_the_result_its_reduce_task_hides(api: Api) -> None:
    created = await api.call("POST", "/v1/runs", json={"task": "sum_hidden", "args": [3]})
    parent = created.json()["run"]["id"]
    await run_until_idle_async(api.app)
    shown = (await api.call("GET", f"/v1/runs/{parent}")).json()["run"]
    assert (shown["state"], shown["result"]) == ("succeeded", "[redacted]")
    listed = (await api.call("GET", "/v1/runs", params={"task": "sum_hidden"})).json()["items"]
    assert [r["result"] for r in listed] == ["[redacted]"]
    assert await RunHandle(api.app, parent).result_async() == 3  # local code sees it whole


async def test_a_bulk_retry_counts_tries_against_the_budget(
    api: Api, tmp_path: Path, each_store_url: str
) -> None:
    created = await api.call(
        "POST", "/v1/runs", json={"task": "fails_once", "args": [str(tmp_path / "flag")]}
    )
    run_id = created.json()["run"]["id"]
    await run_until_idle_async(api.app, raise_errors=False)
    started = await api.call("POST", "/v1/operations", json={"kind": "runs.retry", "ids": [run_id]})
    assert started.status_code == 202, started.text
    final: dict[str, Any] = {}

    async def ended() -> bool:
        final.update((await api.call("GET", started.headers["location"])).json())
        return final["state"] in ("succeeded", "failed", "aborted")

    await until(ended)
    assert final["state"] == "succeeded"
    await run_until_idle_async(api.app)
    run = (await api.call("GET", f"/v1/runs/{run_id}")).json()["run"]
    assert (run["state"], run["attempts"], run["max_attempts"]) == ("succeeded", 2, 1)
    assert (run["tries"], run["lost"]) == (1, 0)
    detail = await page(api, f"/runs/{run_id}")
    attempts = detail[detail.index("<dt>Attempts</dt>") :]
    text = re.sub(r"<[^>]+>", "", attempts[: attempts.index("</dd>")])
    assert "2 of 1" not in text
    assert text.endswith("2 attempts: try 1 of 1, 1 before a retry by hand")
    table = cells(row_of(await page(api, "/runs"), run_id))
    assert "2/1" not in table
    assert "2 (1/1)" in table
    text = await cli(each_store_url, "runs", "show", str(run_id))
    assert "2 attempts: try 1 of 1, 1 before a retry by hand" in " ".join(text.split())


async def test_the_runs_table_times_a_run_from_its_start_and_names_its_worker(
    timed: tuple[Api, FakeClock],
) -> None:
    api, clock = timed
    run_id = (await api.call("POST", "/v1/runs", json={"task": "noop"})).json()["run"]["id"]
    clock.advance(600)  # ten minutes in the queue before a worker takes it
    await run_until_idle_async(api.app)
    detail = (await api.call("GET", f"/v1/runs/{run_id}")).json()
    (attempt,) = detail["attempts"]
    run = detail["run"]
    assert run["started_at"] == attempt["started_at"]
    assert run["worker_id"] == attempt["worker_id"]
    row = cells(row_of(await page(api, "/runs"), run_id))
    finished = next(c for c in row if "after" in c)
    assert "10 min" not in finished  # its wait in the queue is not its duration
    assert finished.endswith("after 0 ms")
    assert row[-1] == attempt["worker_id"]
