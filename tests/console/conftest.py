"""Fixtures of the console's page tests: the API (with the console) served by a real uvicorn on
127.0.0.1, and browsers-without-script (httpx clients with a cookie jar) logged in with tokens
of each scope. The browser tests proper are in ``tests/e2e``."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cronbus.services import Services
from integration.test_api_support import Api, make_app, served

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


@dataclass
class Console:
    """A served console: its API (app open, base URL) and logins."""

    api: Api

    async def token(
        self,
        scope: str = "admin",
        namespaces: Sequence[str] = ("*",),
        name: str = "console-test",
        **options: object,
    ) -> str:
        """A new token made through the services."""
        _, text = await Services(self.api.app).tokens.create(
            name=name, scope=scope, namespaces=list(namespaces), **options
        )
        return text

    async def login(
        self, scope: str = "admin", namespaces: Sequence[str] = ("*",), **options: object
    ) -> Browser:
        """A client logged in with a new token of ``scope`` (its cookie jar holds the session)."""
        token = await self.token(scope, namespaces, **options)
        client = httpx.AsyncClient(base_url=self.api.url, timeout=10.0)
        response = await client.post("/login", data={"token": token, "next": "/"})
        assert response.status_code == 303, response.text
        return Browser(client=client, token=token)


@dataclass
class Browser:
    """A logged-in client: ``get`` pages, ``post`` forms (the CSRF field is added)."""

    client: httpx.AsyncClient
    token: str
    csrf: str = ""

    async def get(self, path: str, **kwargs: object) -> httpx.Response:
        """GET a page; remembers the CSRF token the page carries."""
        response = await self.client.get(path, **kwargs)  # type: ignore[arg-type]
        found = CSRF.search(response.text)
        if found:
            self.csrf = found[1]
        return response

    async def post(self, path: str, data: dict[str, object] | None = None) -> httpx.Response:
        """POST a form as the page would (with the session's CSRF token)."""
        if not self.csrf:
            await self.get("/")
        body = {"csrf": self.csrf, **(data or {})}
        return await self.client.post(path, data=body)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Close the client."""
        await self.client.aclose()


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    """The test app's API and console over real HTTP on a fresh SQLite file."""
    async with served(make_app(f"sqlite:///{tmp_path / 'console.db'}")) as api:
        yield Console(api=api)
