"""Console sessions over real HTTP on each store: the cookie holds a random session id (never
the API token) with the right flags and lifetime; logout, an idle spell, the session's lifetime,
its token's expiry and its token's revocation each end it server-side; failed logins are
limited per client address (issue 30, items 6 and 7)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from http.cookies import SimpleCookie

import httpx
import pytest

from console.conftest import CSRF, Console
from cronbus.testing import FakeClock
from integration.test_api_support import FAST, make_app, served

COOKIE = "cronbus_session"
SESSIONS = replace(FAST, console_idle_seconds=600.0, console_lifetime_seconds=3600.0)
"""Short sessions, so a test jumps the app's clock past them."""


@pytest.fixture
def clock() -> FakeClock:
    """The app's clock: tests move it instead of sleeping."""
    return FakeClock()


@pytest.fixture
async def console(each_store_url: str, clock: FakeClock) -> AsyncIterator[Console]:
    """The console over real HTTP on each store, with short sessions, on ``clock``."""
    async with served(make_app(each_store_url, clock), SESSIONS) as api:
        yield Console(api=api)


def client(console: Console, address: str = "127.0.0.1", **kw: object) -> httpx.AsyncClient:
    """A browser without script, connecting from ``address`` (any of 127.0.0.0/8 is this
    machine, so a test has several real client addresses)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(
        base_url=console.api.url,
        transport=transport,
        timeout=10.0,
        **kw,  # type: ignore[arg-type]
    )


def set_cookie(response: httpx.Response) -> SimpleCookie:
    """The cookies a response sets, parsed (attributes included)."""
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.get_list("set-cookie"):
        jar.load(header)
    return jar


async def login(browser: httpx.AsyncClient, token: str, **headers: str) -> httpx.Response:
    """Post the login form with ``token``."""
    return await browser.post("/login", data={"token": token, "next": "/"}, headers=headers)


async def logged_in(browser: httpx.AsyncClient) -> bool:
    """True when the console shows a page rather than sending the browser to log in."""
    response = await browser.get("/")
    if response.status_code == 303:
        assert response.headers["location"].startswith("/login")
        return False
    assert response.status_code == 200, response.text
    return True


async def test_the_cookie_holds_a_session_id_not_the_token(console: Console) -> None:
    token = await console.token("read")
    async with client(console) as browser:
        response = await login(browser, token)
        assert response.status_code == 303
        headers = " ".join(response.headers.get_list("set-cookie"))
        assert token not in headers
        assert token.split("_")[-1] not in headers  # not even its secret
        cookie = set_cookie(response)[COOKIE]
        assert len(cookie.value) >= 40  # 256 random bits, URL-safe
        assert cookie["httponly"]
        assert cookie["samesite"].lower() == "lax"
        assert not cookie["secure"]  # plain HTTP from a direct client
        assert int(cookie["max-age"]) == 3600  # the session's lifetime, not a year
        assert await logged_in(browser)


async def test_a_copied_cookie_stops_working_after_logout(console: Console) -> None:
    token = await console.token("read")
    async with client(console) as browser:
        assert (await login(browser, token)).status_code == 303
        stolen = browser.cookies[COOKIE]
        async with client(console, cookies={COOKIE: stolen}) as thief:
            assert await logged_in(thief)
            page = await browser.get("/")
            csrf = CSRF.search(page.text)
            assert csrf is not None
            out = await browser.post("/logout", data={"csrf": csrf[1]})
            assert out.status_code == 303
            assert not await logged_in(browser)
            assert not await logged_in(thief)  # the server forgot the session, not just a tab


async def test_the_cookie_of_an_ended_session_is_deleted(console: Console) -> None:
    async with client(console, cookies={COOKIE: "no-such-session"}) as browser:
        response = await browser.get("/runs")
        assert response.status_code == 303
        assert response.headers["location"] == "/login?next=/runs"
        ended = set_cookie(response)[COOKIE]
        assert ended.value == ""
        assert int(ended["max-age"]) == 0  # not sent (and counted as a failure) again


async def test_an_idle_session_ends(console: Console, clock: FakeClock) -> None:
    token = await console.token("read")
    async with client(console) as browser:
        assert (await login(browser, token)).status_code == 303
        clock.advance(300)
        assert await logged_in(browser)  # used: its idle spell starts again
        clock.advance(400)
        assert await logged_in(browser)  # 700 s after login, 400 s idle
        clock.advance(601)
        assert not await logged_in(browser)


async def test_a_busy_session_ends_at_its_lifetime(console: Console, clock: FakeClock) -> None:
    token = await console.token("read")
    async with client(console) as browser:
        assert (await login(browser, token)).status_code == 303
        for _ in range(7):
            clock.advance(500)
            assert await logged_in(browser)
        clock.advance(200)  # 3,700 s after login: past the lifetime, however busy
        assert not await logged_in(browser)


async def test_a_session_ends_with_its_tokens_expiry(console: Console, clock: FakeClock) -> None:
    token = await console.token("read", expires_in=1000)
    async with client(console) as browser:
        response = await login(browser, token)
        assert int(set_cookie(response)[COOKIE]["max-age"]) == 1000
        clock.advance(500)
        assert await logged_in(browser)
        clock.advance(501)
        assert not await logged_in(browser)


async def test_revoking_the_token_ends_its_sessions(console: Console) -> None:
    token = await console.token("read")
    token_id = token.split("_")[1]
    async with client(console) as browser:
        assert (await login(browser, token)).status_code == 303
        assert await logged_in(browser)
        revoked = await console.api.call("DELETE", f"/v1/tokens/{token_id}")
        assert revoked.status_code == 200, revoked.text
        # A session's lookup is reused for AUTH_TTL (5 s) in a process: poll past it.
        deadline = asyncio.get_running_loop().time() + 15
        while await logged_in(browser):
            assert asyncio.get_running_loop().time() < deadline, "the session outlived its token"
            await asyncio.sleep(0.2)


async def test_secure_only_over_https_as_a_trusted_proxy_says(each_store_url: str) -> None:
    trusting = replace(SESSIONS, trusted_proxies=("127.0.0.0/8",))
    elsewhere = replace(SESSIONS, trusted_proxies=("10.0.0.0/8",))
    for settings, secure in ((trusting, True), (elsewhere, False), (SESSIONS, False)):
        async with served(make_app(each_store_url), settings) as api:
            console = Console(api=api)
            async with client(console) as browser:
                response = await login(
                    browser, await console.token("read"), **{"X-Forwarded-Proto": "https"}
                )
                assert response.status_code == 303
                assert bool(set_cookie(response)[COOKIE]["secure"]) is secure, settings


LIMITED = replace(SESSIONS, auth_failure_burst=3, auth_failures=1)


async def bad_logins(browser: httpx.AsyncClient, count: int, **headers: str) -> list[int]:
    """The statuses of ``count`` logins with a wrong token."""
    bad = "cb_000000000000_" + "x" * 43
    return [(await login(browser, bad, **headers)).status_code for _ in range(count)]


async def test_failed_logins_are_limited_per_client_address(each_store_url: str) -> None:
    async with served(make_app(each_store_url), LIMITED) as api:
        console = Console(api=api)
        async with client(console, "127.0.0.2") as guesser, client(console) as other:
            assert await bad_logins(guesser, 3) == [401, 401, 401]
            refused = await login(guesser, "cb_000000000000_" + "y" * 43)
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1
            # A forged X-Forwarded-For from a peer that is no trusted proxy changes nothing.
            assert await bad_logins(guesser, 1, **{"X-Forwarded-For": "198.51.100.9"}) == [429]
            # Nor does a good token never seen here: a guess must not be told apart from it.
            fresh = await console.token("read")
            assert (await login(guesser, fresh)).status_code == 429
            # Another address is not held back, for bad tokens nor good ones.
            assert await bad_logins(other, 1) == [401]
            assert (await login(other, fresh)).status_code == 303


async def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_allowance(
    each_store_url: str,
) -> None:
    settings = replace(LIMITED, trusted_proxies=("127.0.0.1",))
    async with (
        served(make_app(each_store_url), settings) as api,
        client(Console(api=api)) as proxy,
    ):
        one = {"X-Forwarded-For": "203.0.113.1"}
        two = {"X-Forwarded-For": "203.0.113.2"}
        assert await bad_logins(proxy, 4, **one) == [401, 401, 401, 429]
        assert await bad_logins(proxy, 1, **two) == [401]


async def test_console_use_counts_as_the_tokens_use(console: Console, clock: FakeClock) -> None:
    token = await console.token("read")
    token_id = token.split("_")[1]
    async with client(console) as browser:
        assert (await login(browser, token)).status_code == 303
        clock.advance(120)
        assert await logged_in(browser)
    listed = await console.api.call("GET", "/v1/tokens")
    assert listed.status_code == 200, listed.text
    used = next(t for t in listed.json()["items"] if t["id"] == token_id)["last_used_at"]
    assert used is not None
    assert used == pytest.approx(clock.now())  # the tokens page's "last use" stays true
