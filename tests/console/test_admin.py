"""The admin pages: tokens (list, create shown once, revoke, the audit log) and namespaces
(list, create, delete, refusals); admins of every namespace only."""

from __future__ import annotations

import re

import httpx
import pytest

from console.conftest import Console
from console.test_topics import cell
from cronbus.services import EventInput, Services

NEW_TOKEN = re.compile(r'<code id="new-token"[^>]*>(cb_[^<]+)</code>')


async def test_the_tokens_page_lists_every_token_and_the_audit_log(console: Console) -> None:
    services = Services(console.api.app)
    record, _ = await services.tokens.create(
        name="nightly-ci", scope="write", namespaces=["default"], expires_in=3600.0, payloads=False
    )
    revoked, _ = await services.tokens.create(name="old", scope="read", namespaces=["*"])
    await services.tokens.revoke(revoked.id)
    browser = await console.login("admin")
    try:
        response = await browser.get("/tokens")
        assert response.status_code == 200
        html = response.text
        row = cell(html, f"token-{record.id}")
        for text in (record.id, "nightly-ci", "write", "default"):
            assert text in row
        assert cell(html, f"payloads-{record.id}") == "redacted"
        assert cell(html, f"status-{record.id}") == "live"
        assert f'data-testid="revoke-{record.id}"' in html
        assert cell(html, f"status-{revoked.id}").startswith("revoked")
        assert f'data-testid="revoke-{revoked.id}"' not in html  # revoked already
        assert "data-confirm=" in html
        assert 'id="create-token"' in html
        # The audit log, newest first: the login's token, the revoke, then the creates.
        audit = re.findall(r"<code>(tokens\.\w+)</code></td>\s*<td>(\w+)</td>", html)
        assert audit[1:] == [
            ("tokens.revoke", revoked.id),
            ("tokens.create", revoked.id),
            ("tokens.create", record.id),
        ]
        assert 'aria-current="page">Tokens' in html
    finally:
        await browser.close()


async def test_a_new_token_is_shown_once_and_logs_in(console: Console) -> None:
    services = Services(console.api.app)
    browser = await console.login("admin")
    try:
        response = await browser.post(
            "/tokens",
            {"name": "deploy-bot", "scope": "read", "namespaces": "default", "expires_in": "600"},
        )
        assert response.status_code == 200  # the page itself: the token is in no URL
        assert "location" not in response.headers
        assert response.headers["cache-control"] == "no-store"
        found = NEW_TOKEN.search(response.text)
        assert found, response.text
        token = found[1]
        assert "shown this once" in response.text
        (record,) = [t for t in await services.tokens.list() if t.name == "deploy-bot"]
        assert token.startswith(f"cb_{record.id}_")
        assert record.scope == "read"
        assert record.namespaces == ("default",)
        assert record.payloads is False  # the box was not ticked
        assert record.expires_at is not None
        assert 590 < record.expires_at - record.created_at <= 600
        again = await browser.get("/tokens")
        assert token not in again.text
        assert record.id in again.text
        async with httpx.AsyncClient(base_url=console.api.url) as other:
            login = await other.post("/login", data={"token": token, "next": "/topics"})
            assert login.status_code == 303
            page = await other.get("/topics")
            assert page.status_code == 200
            assert "deploy-bot · read" in page.text
    finally:
        await browser.close()


async def test_the_payloads_box_makes_a_token_that_sees_payloads(console: Console) -> None:
    services = Services(console.api.app)
    browser = await console.login("admin")
    try:
        response = await browser.post(
            "/tokens",
            {"name": "sees", "scope": "admin", "namespaces": "*", "payloads": "1"},
        )
        assert response.status_code == 200
        (record,) = [t for t in await services.tokens.list() if t.name == "sees"]
        assert record.payloads is True
        assert record.namespaces == ("*",)
        assert record.expires_at is None
    finally:
        await browser.close()


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (
            {"name": "x", "scope": "read", "namespaces": "nowhere"},
            "no namespace named &#39;nowhere&#39;",
        ),
        ({"name": "x", "scope": "root", "namespaces": "default"}, "scope must be one of"),
        ({"name": "x", "scope": "read", "namespaces": ""}, "give at least one namespace"),
        ({"name": "", "scope": "read", "namespaces": "default"}, "name"),
        (
            {"name": "x", "scope": "read", "namespaces": "default", "expires_in": "soon"},
            "expires in must be a number of seconds",
        ),
        (
            {"name": "x", "scope": "read", "namespaces": "default", "expires_in": "-5"},
            "expires_in",
        ),
    ],
)
async def test_a_refused_token_says_why_and_keeps_the_form(
    console: Console, form: dict[str, object], message: str
) -> None:
    services = Services(console.api.app)
    before = len(await services.tokens.list())
    browser = await console.login("admin")
    try:
        response = await browser.post("/tokens", form)
        assert response.status_code == 400
        error = re.search(
            r'<p class="error" role="alert" id="token-error">(.*?)</p>', response.text
        )
        assert error, response.text
        assert message in error[1]
        assert NEW_TOKEN.search(response.text) is None
        assert f'value="{form["namespaces"]}"' in response.text  # kept for a second try
        assert len(await services.tokens.list()) == before + 1  # only the login's own token
    finally:
        await browser.close()


async def test_revoking_a_token_stops_it(console: Console) -> None:
    services = Services(console.api.app)
    record, text = await services.tokens.create(name="leaked", scope="read", namespaces=["*"])
    browser = await console.login("admin")
    try:
        response = await browser.post(f"/tokens/{record.id}/revoke")
        assert response.status_code == 303
        assert response.headers["location"].startswith("/tokens?notice=")
        assert (await services.tokens.get(record.id)).revoked_at is not None
        shown = await browser.get(response.headers["location"])
        assert f"token {record.id} (leaked) revoked" in shown.text
        assert cell(shown.text, f"status-{record.id}").startswith("revoked")
        async with httpx.AsyncClient(base_url=console.api.url) as other:
            login = await other.post("/login", data={"token": text, "next": "/"})
            assert login.status_code == 401
            assert "was revoked" in login.text
        unknown = await browser.post("/tokens/0123456789ab/revoke")
        assert unknown.status_code == 404
        malformed = await browser.post("/tokens/nope/revoke")
        assert malformed.status_code == 400
        assert "must be a token id" in malformed.text
    finally:
        await browser.close()


@pytest.mark.parametrize(
    ("scope", "namespaces"), [("read", ["*"]), ("write", ["*"]), ("admin", ["default"])]
)
async def test_only_admins_of_every_namespace_see_admin_pages(
    console: Console, scope: str, namespaces: list[str]
) -> None:
    services = Services(console.api.app)
    record, _ = await services.tokens.create(name="target", scope="read", namespaces=["*"])
    browser = await console.login(scope, namespaces=namespaces)
    try:
        home = await browser.get("/topics")
        assert home.status_code == 200
        assert 'href="/tokens"' not in home.text
        assert 'href="/namespaces"' not in home.text
        for path in ("/tokens", "/namespaces"):
            response = await browser.get(path)
            assert response.status_code == 403, path
            assert 'class="error"' in response.text
        posts = {
            "/tokens": {"name": "sneaky", "scope": "admin", "namespaces": "*"},
            f"/tokens/{record.id}/revoke": {},
            "/namespaces": {"name": "sneaky"},
            "/namespaces/default/delete": {},
        }
        for path, form in posts.items():
            assert (await browser.post(path, form)).status_code == 403, path
        assert all(t.name != "sneaky" for t in await services.tokens.list())
        assert (await services.tokens.get(record.id)).revoked_at is None
        assert all(ns.name != "sneaky" for ns in await services.namespaces.list())
    finally:
        await browser.close()


async def test_an_admin_sees_the_admin_nav(console: Console) -> None:
    browser = await console.login("admin")
    try:
        html = (await browser.get("/topics")).text
        assert 'href="/tokens"' in html
        assert 'href="/namespaces"' in html
    finally:
        await browser.close()


async def test_namespaces_are_created_and_deleted(console: Console) -> None:
    services = Services(console.api.app)
    browser = await console.login("admin")
    try:
        html = (await browser.get("/namespaces")).text
        assert 'data-testid="namespace-default"' in html
        assert 'data-testid="delete-default"' not in html  # default always stays
        created = await browser.post("/namespaces", {"name": "team-a"})
        assert created.status_code == 303
        shown = await browser.get(created.headers["location"])
        assert "namespace team-a created" in shown.text
        assert 'data-testid="namespace-team-a"' in shown.text
        assert 'data-testid="delete-team-a"' in shown.text
        assert "data-confirm=" in shown.text
        assert "team-a" in {ns.name for ns in await services.namespaces.list()}
        deleted = await browser.post("/namespaces/team-a/delete")
        assert deleted.status_code == 303
        assert "team-a" not in {ns.name for ns in await services.namespaces.list()}
        audit = (await browser.get("/tokens")).text.split('id="audit"')[1]
        assert audit.index("namespaces.delete") < audit.index("namespaces.create")
    finally:
        await browser.close()


async def test_refused_namespace_changes_show_the_services_message(console: Console) -> None:
    services = Services(console.api.app)
    await services.namespaces.create("busy")
    await services.using("busy").topics.publish("busy.events", [EventInput(type="x")])
    browser = await console.login("admin")
    try:
        held = await browser.post("/namespaces/busy/delete")
        assert held.status_code == 409
        assert "the namespace &#39;busy&#39; still holds" in held.text
        assert 'data-testid="namespace-busy"' in held.text  # the list, not an error page alone
        default = await browser.post("/namespaces/default/delete")
        assert default.status_code == 409
        assert "cannot be deleted" in default.text
        twice = await browser.post("/namespaces", {"name": "busy"})
        assert twice.status_code == 409
        bad = await browser.post("/namespaces", {"name": "no spaces"})
        assert bad.status_code == 400
        assert 'value="no spaces"' in bad.text
        assert "busy" in {ns.name for ns in await services.namespaces.list()}
    finally:
        await browser.close()
