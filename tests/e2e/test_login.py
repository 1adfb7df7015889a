"""Logging in to the console in a real browser: a bad token is refused on the form, a good one
lands on the page asked for (the overview by default); and the guard every browser test has
notices a request to another origin."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from .browsing import login
from .conftest import OriginGuard
from .served import Server, until

pytestmark = pytest.mark.e2e


def test_a_bad_token_is_refused_on_the_form(page: Page) -> None:
    page.goto("/")
    page.wait_for_url("**/login?next=/")
    page.get_by_label("API token").fill("cb_000000000000_not-a-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("p.error[role=alert]")).to_be_visible()
    expect(page.get_by_label("API token")).to_be_visible()
    expect(page.locator('nav[aria-label="Sections"]')).to_have_count(0)


def test_a_good_token_lands_on_the_overview(page: Page, server: Server) -> None:
    login(page, server.tokens.read)
    expect(page.get_by_role("heading", level=1)).to_contain_text("Overview")
    expect(page.locator("[data-figure=runs_running]")).to_be_visible()
    expect(page.locator('nav[aria-label="Sections"] a[aria-current=page]')).to_have_text("Overview")


def test_a_page_asked_for_before_login_is_shown_after_it(page: Page, server: Server) -> None:
    page.goto("/workers")
    page.wait_for_url("**/login?next=/workers")
    page.get_by_label("API token").fill(server.tokens.read)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/workers")
    expect(page.locator("#workers")).to_contain_text("console-worker-1")


def test_the_origin_guard_notices_a_request_elsewhere(browser: Browser, server: Server) -> None:
    context = browser.new_context(base_url=server.url)
    guard = OriginGuard(server.url)
    guard.watch(context)
    try:
        page = context.new_page()
        page.goto("/login")
        assert guard.foreign == []
        # Another port of the same host is another origin (nothing listens on port 9).
        page.evaluate("fetch('http://127.0.0.1:9/font.woff2').catch(() => null)")
        until(lambda: guard.foreign == ["http://127.0.0.1:9/font.woff2"], "the fetch noted")
    finally:
        context.close()
