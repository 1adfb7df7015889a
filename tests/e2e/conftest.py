"""Fixtures of the console's browser tests: one seeded ``cronbus server`` process and one
headless Chromium for the package's tests, a fresh browser context per test (each test logs in
through the real login form), and a guard that fails a test whose pages sent any request to
another origin than the server's.

Chromium is Debian's ``/usr/bin/chromium`` (never downloaded): without it the tests are
skipped, or fail when ``CI=true``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    Request,
    expect,
    sync_playwright,
)

from .browsing import DESKTOP, TIMEOUT_MS
from .served import Server, start

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

expect.set_options(timeout=TIMEOUT_MS)

NewPage = Callable[..., Page]
"""``new_page(**context_options)``: a page in a fresh, guarded context."""


# Package scope, not session: Playwright's sync API keeps its event loop marked as running in
# the main thread until it stops, and every asyncio test the same test process runs after the
# browser tests would find "another loop running". Leaving this package stops it.
@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    """Playwright's driver (sync API), skipped or failed without Chromium."""
    if not CHROMIUM.exists():
        message = f"the browser tests need Chromium at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """One headless Chromium for the session."""
    chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The seeded console every browser test looks at (tests change different things)."""
    with start(tmp_path_factory.mktemp("e2e")) as served:
        yield served


class OriginGuard:
    """Notes every request a browser context sends anywhere but ``origin``."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.foreign: list[str] = []

    def watch(self, context: BrowserContext) -> None:
        """Note the requests of every page of ``context`` from now on."""
        context.on("request", self._note)

    def _note(self, request: Request) -> None:
        if request.url != self.origin and not request.url.startswith(self.origin + "/"):
            self.foreign.append(request.url)


@pytest.fixture
def new_page(browser: Browser, server: Server) -> Iterator[NewPage]:
    """Pages in fresh contexts (``new_page(viewport=..., color_scheme=...)``); after the test,
    every request they made must have gone to the server."""
    contexts: list[BrowserContext] = []
    guard = OriginGuard(server.url)

    def make(**options: Any) -> Page:
        options.setdefault("viewport", DESKTOP)
        context = browser.new_context(base_url=server.url, **options)
        context.set_default_timeout(TIMEOUT_MS)
        guard.watch(context)
        contexts.append(context)
        return context.new_page()

    try:
        yield make
    finally:
        for context in contexts:
            context.close()
    assert not guard.foreign, f"requests left the server: {guard.foreign}"


@pytest.fixture
def page(new_page: NewPage) -> Page:
    """A desktop-sized page in a fresh context."""
    return new_page()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep every browser test on one test process (``make test`` runs pytest-xdist with
    ``--dist loadgroup``): they share one server and one Chromium per process, so spreading
    them would start three of each."""
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.xdist_group("e2e"))
