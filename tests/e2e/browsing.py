"""What the browser tests share: sizes, timeouts, logging in through the form, and the pages
of the console with what each needs to be found."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from playwright.sync_api import Page

from .served import Server

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
TIMEOUT_MS = 20_000
"""How long a Playwright action or expectation waits by default, on a busy machine."""
LIVE_MS = 30_000
"""How long a live update may take to show (a tick every 2 s, then an htmx refetch)."""


def login(page: Page, token: str, next_path: str = "/") -> None:
    """Log in through the login form with ``token`` and wait to land on ``next_path``."""
    page.goto("/login?next=" + quote(next_path, safe="/"))
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Log in").click()
    wanted = urlsplit(next_path).path
    page.wait_for_url(lambda url: urlsplit(url).path == wanted)


def pages(server: Server) -> dict[str, str]:
    """Every page of the console by a short name (the screenshot's): its path."""
    return {
        "overview": "/",
        "jobs": "/jobs",
        "job": "/jobs/every_minute",
        "runs": "/runs",
        "run": f"/runs/{server.failed_run}",
        "dead-letters": "/dead-letters",
        "workers": "/workers",
        "topics": "/topics",
        "topic": "/topics/orders",
        "subscriptions": "/subscriptions",
        "subscription": "/subscriptions/billing-webhook",
        "operations": "/operations",
        "operation": f"/operations/{server.operation}",
        "tokens": "/tokens",
        "namespaces": "/namespaces",
    }
