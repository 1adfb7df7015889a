"""The console offers what the token may do, nothing more: a read-only token sees no control
that changes anything, on any page; a token without payloads sees arguments and results
redacted."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from .browsing import login, pages
from .served import CARD, Server

pytestmark = pytest.mark.e2e

CHANGES = ["Trigger", "Pause", "Resume", "Retry", "Cancel", "Requeue", "Purge", "Drain"]
CHANGES += ["Revoke", "Abort", "Replay", "Delete", "Create"]
"""Words of a button that changes something."""

CONTROLS = """() => {
  const kept = ["/logout", "/namespace"];
  const forms = [...document.forms]
    .filter(f => f.method === "post" && !kept.includes(new URL(f.action).pathname))
    .map(f => "form " + new URL(f.action).pathname);
  const htmx = [...document.querySelectorAll("[hx-post],[hx-put],[hx-patch],[hx-delete]")]
    .map(e => "htmx " + e.outerHTML.slice(0, 80));
  const buttons = [...document.querySelectorAll("button, input[type=submit], a.button")]
    .map(e => (e.textContent || e.value || "").trim())
    .filter(text => WORDS.some(word => text.toLowerCase().startsWith(word.toLowerCase())))
    .map(text => "button " + text);
  return [...forms, ...htmx, ...buttons];
}"""


def test_a_read_only_token_sees_no_control_that_changes_anything(
    page: Page, server: Server
) -> None:
    login(page, server.tokens.read)
    script = CONTROLS.replace("WORDS", repr(list(CHANGES)))
    seen: dict[str, list[str]] = {}
    for name, path in pages(server).items():
        response = page.goto(path)
        assert response is not None
        # Admin pages answer 403 to a read token; every other page is shown.
        assert response.status == (403 if name in ("tokens", "namespaces") else 200), name
        found = page.evaluate(script)
        if found:
            seen[path] = found
    assert not seen
    expect(page.locator('nav[aria-label="Sections"] a[href="/tokens"]')).to_have_count(0)


def test_the_check_finds_the_controls_a_write_token_gets(page: Page, server: Server) -> None:
    login(page, server.tokens.write, "/jobs")
    found = page.evaluate(CONTROLS.replace("WORDS", repr(list(CHANGES))))
    assert any(item.startswith("form /jobs/") for item in found), found
    assert any(item.startswith("button Trigger") for item in found), found


def test_a_token_without_payloads_sees_them_redacted(page: Page, server: Server) -> None:
    login(page, server.tokens.read, f"/runs/{server.ok_run}")
    main = page.locator("main")
    expect(main).to_contain_text('"ada"')  # an argument, to a reader
    expect(main).to_contain_text("confirmed")  # and the result
    page.context.clear_cookies()
    login(page, server.tokens.no_payloads, f"/runs/{server.ok_run}")
    expect(main).to_contain_text("[redacted]")
    expect(main).not_to_contain_text('"ada"')
    expect(main).not_to_contain_text("confirmed")


def test_an_argument_the_task_redacts_is_hidden_from_every_token(
    page: Page, server: Server
) -> None:
    login(page, server.tokens.admin, f"/runs/{server.refund}")
    main = page.locator("main")
    expect(main).to_contain_text("1002")  # the order, not redacted
    expect(main).to_contain_text("[redacted]")
    expect(main).not_to_contain_text(CARD)
