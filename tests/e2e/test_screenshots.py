"""Pictures of every console page for docs/console.md: 1280 x 800 in the light theme (the login
form and a delivery's attempts too), the overview in the dark one, and the runs page on a 390 px
phone.

They are written to ``docs/console/`` (same names each time, overwritten) when
``CRONBUS_SCREENSHOTS=1``, else to the test's temporary folder; either way each page must load
without an error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .browsing import PHONE, login, pages
from .conftest import NewPage
from .served import Server

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"


def shoot(page: Page, path: str, picture: Path, *, whole: bool = True) -> None:
    """Open ``path``, wait until it is live, and save it as ``picture`` (the whole page, or
    what the window shows)."""
    response = page.goto(path)
    assert response is not None, path
    assert response.ok, f"{path}: {response.status}"
    expect(page.get_by_role("heading", level=1).first).to_be_visible()
    expect(page.locator("[data-live-state]")).to_have_text("live")
    page.screenshot(path=picture, full_page=whole, animations="disabled")
    assert picture.stat().st_size > 10_000, picture


def test_screenshots_of_every_page(new_page: NewPage, server: Server, tmp_path: Path) -> None:
    folder = DOCS if os.environ.get("CRONBUS_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page = new_page(color_scheme="light")
    login(page, server.tokens.admin)
    for name, path in pages(server).items():
        # The runs table is long: its first screenful says what it is.
        shoot(page, path, folder / f"{name}.png", whole=name != "runs")
    # A delivery's page (its attempts with status and response) is reached from the
    # subscription's table; the webhook's deliveries are pushed by the served dispatcher.
    page.goto("/subscriptions/billing-webhook")
    delivery = page.locator('a[href^="/deliveries/"]').first
    expect(delivery).to_be_visible()
    href = delivery.get_attribute("href")
    assert href is not None
    shoot(page, href, folder / "delivery.png")
    dark = new_page(color_scheme="dark")
    login(dark, server.tokens.admin)
    shoot(dark, "/", folder / "overview-dark.png")
    stranger = new_page(color_scheme="light")
    stranger.goto("/login")
    expect(stranger.get_by_role("button", name="Log in")).to_be_visible()
    stranger.screenshot(path=folder / "login.png", animations="disabled")
    phone = new_page(color_scheme="light", viewport=PHONE)
    login(phone, server.tokens.admin)
    shoot(phone, "/runs", folder / "runs-phone.png", whole=False)
