"""Logging in and out, the session cookie, CSRF and the namespace switcher."""

from __future__ import annotations

import httpx

from console.conftest import Console


async def test_pages_need_a_login(console: Console) -> None:
    async with httpx.AsyncClient(base_url=console.api.url) as client:
        response = await client.get("/?window=86400")
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/%3Fwindow%3D86400"


async def test_a_bad_token_is_refused_on_the_login_page(console: Console) -> None:
    async with httpx.AsyncClient(base_url=console.api.url) as client:
        response = await client.post("/login", data={"token": "cb_nope", "next": "/"})
    assert response.status_code == 401
    assert "not a cronbus token" in response.text
    assert "cronbus_session" not in response.headers.get("set-cookie", "")


async def test_login_sets_an_httponly_lax_session_cookie_and_logout_drops_it(
    console: Console,
) -> None:
    token = await console.token("read")
    async with httpx.AsyncClient(base_url=console.api.url) as client:
        response = await client.post("/login", data={"token": token, "next": "//evil.example/"})
        assert response.status_code == 303
        assert response.headers["location"] == "/"  # never sent off this server
        cookie = next(
            c.lower() for c in response.headers.get_list("set-cookie") if "cronbus_session=" in c
        )
        assert "httponly" in cookie
        assert "samesite=lax" in cookie  # why not Strict: cronbus.console.session
        page = await client.get("/")
        assert page.status_code == 200
        assert "Log out" in page.text
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        out = await client.post("/logout", data={"csrf": csrf})
        assert out.status_code == 303
        assert (await client.get("/")).status_code == 303


async def test_a_post_without_the_csrf_token_is_refused(console: Console) -> None:
    browser = await console.login("admin")
    try:
        response = await browser.client.post("/logout", data={})
        assert response.status_code == 403
        assert "reload the page" in response.text
        cross = await browser.client.post(
            "/logout", data={"csrf": "x"}, headers={"Origin": "http://evil.example"}
        )
        assert cross.status_code == 403
        assert "another site" in cross.text
    finally:
        await browser.close()


async def test_the_switcher_offers_only_the_tokens_namespaces(console: Console) -> None:
    browser = await console.login("read", namespaces=["default"])
    try:
        page = await browser.get("/")
        assert '<option value="default" selected>' in page.text
        refused = await browser.post("/namespace", {"namespace": "other", "next": "/"})
        assert refused.status_code == 403
    finally:
        await browser.close()
