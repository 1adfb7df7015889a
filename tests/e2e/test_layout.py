"""The console on a phone, by keyboard, in a hidden tab and in the dark: every page fits 390 px
(tables scroll inside their frame), Tab walks the skip link, the menu and the search box, a
hidden tab holds no stream, and the dark theme follows the system."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from .browsing import PHONE, login, pages
from .conftest import NewPage
from .served import Server

pytestmark = pytest.mark.e2e

NAV = ["Overview", "Jobs", "Runs", "Dead letters", "Workers", "Topics", "Subscriptions"]


def test_every_page_fits_a_phone(new_page: NewPage, server: Server) -> None:
    page = new_page(viewport=PHONE)
    login(page, server.tokens.admin)
    nav = page.locator('nav[aria-label="Sections"] a')
    wide: dict[str, int] = {}
    for path in pages(server).values():
        response = page.goto(path)
        assert response is not None, path
        assert response.ok, path
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            wide[path] = width
        expect(nav).to_have_count(len(NAV) + 3)  # + operations, tokens, namespaces
        for i in range(nav.count()):
            expect(nav.nth(i)).to_be_visible()
    assert not wide, f"pages wider than the phone: {wide}"


def focused(page: Page) -> str:
    """What has the keyboard focus: its id, else its text."""
    text: str = page.evaluate(
        "() => { const e = document.activeElement;"
        " return e.id ? '#' + e.id : (e.textContent || '').trim(); }"
    )
    return text


def test_tab_walks_the_skip_link_the_menu_and_the_search_box(page: Page, server: Server) -> None:
    login(page, server.tokens.read, "/runs")
    order = []
    for _ in range(len(NAV) + 2):
        page.keyboard.press("Tab")
        order.append(focused(page))
    assert order[0] == "Skip to content"
    assert [name for name in order if name in NAV] == NAV
    for _ in range(40):
        if focused(page) == "#q":
            break
        page.keyboard.press("Tab")
    assert focused(page) == "#q"
    page.keyboard.type("state:dead")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"[?&]q=state(%3A|:)dead"))
    expect(page.locator("#runs tbody tr").first).to_be_visible()
    states = page.locator("#runs tbody tr .badge").all_text_contents()
    assert states, "no dead run listed"
    assert set(states) == {"dead"}, states


def test_tab_reaches_the_buttons_of_a_job(page: Page, server: Server) -> None:
    login(page, server.tokens.write, "/jobs")
    target = page.get_by_test_id("trigger-every_minute")
    for _ in range(80):
        if target.evaluate("e => e === document.activeElement"):
            break
        page.keyboard.press("Tab")
    expect(target).to_be_focused()


# EventSource instances made by the page, so the test can see them open and close.
TRACK_STREAMS = """
window.streams = [];
const Native = window.EventSource;
window.EventSource = class extends Native {
  constructor(url, init) { super(url, init); window.streams.push(this); }
};
"""
SET_HIDDEN = """hidden => {
  Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
  Object.defineProperty(document, "visibilityState",
    {configurable: true, get: () => hidden ? "hidden" : "visible"});
  document.dispatchEvent(new Event("visibilitychange"));
}"""
OPEN_STREAMS = "window.streams.filter(s => s.readyState !== EventSource.CLOSED).length"


def test_a_hidden_tab_holds_no_stream(page: Page, server: Server) -> None:
    page.add_init_script(TRACK_STREAMS)
    login(page, server.tokens.read)
    state = page.locator("[data-live-state]")
    expect(state).to_have_text("live")
    assert page.evaluate(OPEN_STREAMS) == 1
    page.evaluate(SET_HIDDEN, True)
    expect(state).to_have_text("paused while hidden")
    assert page.evaluate(OPEN_STREAMS) == 0
    page.evaluate(SET_HIDDEN, False)
    expect(state).to_have_text("live")
    assert page.evaluate(OPEN_STREAMS) == 1
    assert page.evaluate("window.streams.length") == 2


BACKGROUND = "getComputedStyle(document.body).backgroundColor"


def lightness(css: str) -> float:
    """The relative lightness (0 black to 1 white) of an ``rgb(r, g, b)`` colour."""
    found = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, [\d.]+)?\)", css)
    assert found, css
    r, g, b = (int(v) / 255 for v in found.groups())
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_the_dark_theme_follows_the_system(new_page: NewPage, server: Server) -> None:
    dark = new_page(color_scheme="dark")
    login(dark, server.tokens.read)
    assert lightness(dark.evaluate(BACKGROUND)) < 0.2
    light = new_page(color_scheme="light")
    login(light, server.tokens.read)
    assert lightness(light.evaluate(BACKGROUND)) > 0.8
