"""Helpers of the HTTP API tests (no tests here): the API served by a real uvicorn server on
127.0.0.1 (an ephemeral port) on the test's own event loop, and tokens made through the
services, as an operator makes them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronbus import App
from cronbus.api import ApiSettings, create_api
from cronbus.api.serving import ApiServer, listen
from cronbus.clock import Clock
from cronbus.services import Services

FAST = ApiSettings(rate=1_000_000, auth_failure_burst=1_000_000)
"""Settings under which no test meets a rate limit (per token, or of failed token lookups per
client address) unless it wants to."""


def make_app(url: str, clock: Clock | None = None) -> App:
    """An app with the tasks the API tests defer and schedule (on ``clock``, if given)."""
    app = App(store=url, clock=clock)

    @app.task(name="send", queue="emails")
    def send(to: str, subject: str = "hi") -> str:
        return f"{subject} {to}"

    @app.task(name="noop")
    def noop() -> None:
        return None

    @app.task(name="on_event")
    def on_event(event: dict[str, Any]) -> None:
        return None

    @app.task(name="boom", retries=0)
    def boom() -> None:
        raise RuntimeError("boom")

    return app


@dataclass
class Api:
    """A served API: its app (open), its base URL and a client for it."""

    app: App
    url: str
    client: httpx.AsyncClient
    tokens: dict[str, str] = field(default_factory=dict)

    async def token(
        self, scope: str = "admin", namespaces: Sequence[str] = ("*",), name: str = "test"
    ) -> str:
        """A new token, made through the services (as `cronbus tokens create` does)."""
        _, text = await Services(self.app).tokens.create(
            name=name, scope=scope, namespaces=list(namespaces)
        )
        return text

    async def headers(
        self, scope: str = "admin", namespaces: Sequence[str] = ("*",)
    ) -> dict[str, str]:
        """An Authorization header with a token of ``scope`` over ``namespaces`` (made once
        per scope and namespaces, then reused)."""
        key = f"{scope}:{','.join(namespaces)}"
        if key not in self.tokens:
            self.tokens[key] = await self.token(scope, namespaces)
        return {"Authorization": f"Bearer {self.tokens[key]}"}

    async def call(
        self, method: str, path: str, *, scope: str = "admin", **kwargs: Any
    ) -> httpx.Response:
        """A request with an admin (or ``scope``) token of every namespace."""
        headers = {**await self.headers(scope), **kwargs.pop("headers", {})}
        return await self.client.request(method, path, headers=headers, **kwargs)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Poll ``check`` until it holds, failing after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def served(app: App, settings: ApiSettings = FAST) -> AsyncIterator[Api]:
    """``app``'s API served by uvicorn on 127.0.0.1 until the block ends."""
    server = ApiServer(app, listen("127.0.0.1", 0), settings)
    async with app:
        task = asyncio.create_task(server.serve())
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=10.0) as client:

                async def healthy() -> bool:
                    if task.done():
                        task.result()  # the server failed: say why
                    try:
                        return (await client.get("/v1/health")).status_code == 200
                    except httpx.TransportError:
                        return False

                await until(healthy)
                yield Api(app=app, url=server.url, client=client)
        finally:
            server.stop()
            await asyncio.wait_for(task, 15)


@asynccontextmanager
async def in_process(app: App, settings: ApiSettings = FAST) -> AsyncIterator[Api]:
    """``app``'s API over httpx's ASGI transport: no socket, and an unexpected error of the
    app raises in the test instead of answering 500."""
    api = create_api(app, settings)
    async with app:
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            yield Api(app=app, url="http://api", client=client)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """The test app's API over real HTTP on a fresh SQLite file."""
    async with served(make_app(f"sqlite:///{tmp_path / 'api.db'}")) as found:
        yield found


@pytest.fixture
async def each_api(each_store_url: str) -> AsyncIterator[Api]:
    """The test app's API over real HTTP on each store in turn (SQLite, then PostgreSQL)."""
    async with served(make_app(each_store_url)) as found:
        yield found


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[Api]:
    """The test app's API in process (ASGI transport) on a fresh SQLite file."""
    async with in_process(make_app(f"sqlite:///{tmp_path / 'api.db'}")) as found:
        yield found


def problem(response: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    """The response's problem document, checked: its status, media type and shape, and for a
    422 that ``field`` is among the fields it names."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:cronbus:problem:")
    assert body["title"]
    if field is not None:
        fields = [e["field"] for e in body["errors"]]
        assert field in fields, (field, fields, body)
    return body
