"""The live stream (``GET /live``) over real HTTP: server-sent ticks with the overview's
version and figures, one computation per tick however many tabs listen, nothing computed for a
namespace nobody listens to, the token checked again while the stream lasts, and a server that
stops without waiting for open streams."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from console.conftest import Console
from cronbus.api.serving import ApiServer, listen
from cronbus.console import hub as hub_module
from cronbus.console.hub import HUB
from cronbus.console.routes import live
from cronbus.console.session import SESSION_COOKIE
from cronbus.services import Services
from integration.test_api_support import FAST, make_app, served, until


@dataclass
class Stream:
    """A live stream read in the background: its ticks in order, and whether it ended."""

    response: httpx.Response
    ticks: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    ended: bool = False

    async def read(self) -> None:
        """Collect the ticks until the server ends the stream."""
        event = None
        try:
            async for line in self.response.aiter_lines():
                self.lines.append(line)
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: ") and event == "tick":
                    self.ticks.append(json.loads(line.removeprefix("data: ")))
                elif not line:
                    event = None
        finally:
            self.ended = True


@contextlib.asynccontextmanager
async def streams(
    url: str, token: str, count: int = 1, ns: str = "default"
) -> AsyncIterator[list[Stream]]:
    """``count`` live streams of namespace ``ns``, each on its own connection, as tabs."""
    limits = httpx.Limits(max_connections=count + 5)
    async with (
        httpx.AsyncClient(base_url=url, timeout=30.0, limits=limits) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        # Logged in through the form: the cookie holds a session of the token, as a browser's.
        login = await client.post("/login", data={"token": token, "next": "/"})
        assert login.status_code == 303, login.text
        opened = []
        readers = []
        for _ in range(count):
            response = await stack.enter_async_context(client.stream("GET", f"/live?ns={ns}"))
            assert response.status_code == 200, response.status_code
            stream = Stream(response)
            opened.append(stream)
            readers.append(asyncio.create_task(stream.read()))
        try:
            yield opened
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)


def watching(console: Console, namespace: str = "default") -> bool:
    """True while the hub runs a feed for ``namespace`` of the console's store."""
    wanted = (id(console.api.app.store), namespace)
    return any(key[1] == wanted for key in HUB.watched())  # type: ignore[index]


async def test_a_tick_arrives_at_once_with_the_version_and_figures(console: Console) -> None:
    token = await console.token("admin")
    async with streams(console.api.url, token) as (stream,):
        headers = stream.response.headers
        assert headers["content-type"].startswith("text/event-stream")
        assert headers["cache-control"] == "no-cache"
        assert headers["x-accel-buffering"] == "no"

        async def ticked() -> bool:
            return bool(stream.ticks)

        await until(ticked, 20.0)
        first = stream.ticks[0]
        assert first["version"]
        figures = first["figures"]
        for name in (
            "runs_running",
            "runs_queued",
            "dead_letters",
            "workers_alive",
            "subscriptions_failing",
            "scheduler_lag",
        ):
            assert name in figures, name
        assert figures["runs_queued"] == "0"
        assert stream.lines[0] == f"retry: {live.RETRY_MS}"


async def test_the_version_and_figures_change_after_a_run_is_deferred(console: Console) -> None:
    token = await console.token("admin")
    async with streams(console.api.url, token) as (stream,):

        async def ticked() -> bool:
            return bool(stream.ticks)

        await until(ticked, 20.0)
        before = stream.ticks[-1]["version"]
        await Services(console.api.app).runs.defer("noop")

        async def changed() -> bool:
            return stream.ticks[-1]["version"] != before

        await until(changed, 20.0)
        assert stream.ticks[-1]["figures"]["runs_queued"] == "1"


async def test_twenty_tabs_cost_one_computation_per_tick(console: Console) -> None:
    token = await console.token("read", ["default"])
    async with streams(console.api.url, token, count=20) as tabs:

        async def all_ticked(at_least: int) -> bool:
            return all(len(tab.ticks) >= at_least for tab in tabs)

        await until(lambda: all_ticked(1), 30.0)
        assert watching(console)
        counts = [len(tab.ticks) for tab in tabs]
        before = HUB.computations
        # Every tab sees three more ticks...
        await until(lambda: all_ticked(max(counts) + 3), 30.0)
        spent = HUB.computations - before
        ticks = max(len(tab.ticks) for tab in tabs) - min(counts)
        # ...and the hub computed once per tick (one more for a tick under way), not per tab.
        assert spent <= ticks + 1, (spent, ticks)
        assert spent < 20
        versions = {tab.ticks[-1]["version"] for tab in tabs}
        assert len(versions) <= 2  # a tick may be on its way to some tabs


async def test_a_closed_stream_stops_the_work_for_its_namespace(console: Console) -> None:
    token = await console.token("admin")
    async with streams(console.api.url, token) as (stream,):

        async def ticked() -> bool:
            return bool(stream.ticks)

        await until(ticked, 20.0)
        assert watching(console)

    async def idle() -> bool:
        return not watching(console)

    await until(idle, 20.0)
    before = HUB.computations
    # Nothing to wait for: the absence of work is observed over more than two ticks.
    await asyncio.sleep(2.5 * hub_module.TICK)
    assert HUB.computations == before


async def test_a_read_only_token_streams_its_namespace(console: Console) -> None:
    services = Services(console.api.app)
    await services.namespaces.create("shop")
    await services.using("shop").runs.defer("noop")
    token = await console.token("read", ["shop"])
    async with streams(console.api.url, token, ns="shop") as (stream,):

        async def ticked() -> bool:
            return bool(stream.ticks)

        await until(ticked, 20.0)
        assert stream.ticks[0]["figures"]["runs_queued"] == "1"


async def test_no_session_is_sent_to_the_login_page(console: Console) -> None:
    response = await console.api.client.get("/live?ns=default")
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/live%3Fns%3Ddefault"
    async with httpx.AsyncClient(
        base_url=console.api.url, cookies={SESSION_COOKIE: "no-such-session"}
    ) as c:
        bad = await c.get("/live")
    assert bad.status_code == 303


async def test_a_revoked_token_ends_the_stream(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "RECHECK", 0.5)
    record, token = await Services(console.api.app).tokens.create(
        name="tab", scope="read", namespaces=["default"]
    )
    async with streams(console.api.url, token) as (stream,):

        async def ticked() -> bool:
            return len(stream.ticks) >= 2  # a recheck passed with the token still valid

        await until(ticked, 20.0)
        assert not stream.ended
        await Services(console.api.app).tokens.revoke(record.id)

        async def ended() -> bool:
            return stream.ended

        await until(ended, 30.0)  # the session's token lookups are cached 5 s


async def test_stop_streams_lets_the_server_stop_at_once(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'stop.db'}")
    server = ApiServer(app, listen("127.0.0.1", 0), FAST)
    async with app:
        _, token = await Services(app).tokens.create(name="t", scope="read", namespaces=["*"])
        task = asyncio.create_task(server.serve())

        async def started() -> bool:
            return server.started

        await until(started, 20.0)
        async with streams(server.url, token) as (stream,):

            async def ticked() -> bool:
                return bool(stream.ticks)

            await until(ticked, 20.0)
            began = time.monotonic()
            assert live.stop_streams(server.server.config.app) == 1
            server.stop()
            await asyncio.wait_for(task, 30)
            # uvicorn's graceful shutdown would have waited 10 s for the stream.
            assert time.monotonic() - began < 5.0

            async def ended() -> bool:
                return stream.ended

            await until(ended, 10.0)


async def test_served_exits_promptly_with_a_stream_open(tmp_path: Path) -> None:
    serving = served(make_app(f"sqlite:///{tmp_path / 'served.db'}"))
    api = await serving.__aenter__()
    exited = False
    try:
        token = await api.token("read")
        async with streams(api.url, token) as (stream,):

            async def ticked() -> bool:
                return bool(stream.ticks)

            await until(ticked, 20.0)
            began = time.monotonic()
            # The server stops while the stream is open (the tab still listening).
            exited = True
            await serving.__aexit__(None, None, None)
            assert time.monotonic() - began < 5.0
    finally:
        if not exited:
            await serving.__aexit__(None, None, None)
