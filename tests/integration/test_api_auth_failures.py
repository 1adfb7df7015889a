"""Failed token lookups of the HTTP API are limited per client address (issue 30, item 7), over
real HTTP on each store: a token bucket of failures per address, 429 with Retry-After once it
is empty, other addresses unaffected, and a token this process already knows good still
admitted from a blocked address."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import httpx

from .test_api_support import FAST, Api, make_app, problem, served

LIMITED = replace(FAST, auth_failure_burst=3, auth_failures=1)
BAD = "cb_000000000000_" + "x" * 43


@asynccontextmanager
async def client(api: Api, address: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client connecting from ``address`` (any of 127.0.0.0/8 is this machine)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=api.url, transport=transport, timeout=10.0) as found:
        yield found


async def runs(caller: httpx.AsyncClient, token: str | None, **headers: str) -> int:
    """The status of listing runs with ``token`` (None: no Authorization header)."""
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return (await caller.get("/v1/runs", headers=headers)).status_code


async def test_bad_tokens_from_one_address_get_429_while_another_is_unaffected(
    each_store_url: str,
) -> None:
    async with served(make_app(each_store_url), LIMITED) as api:
        good = await api.token("read")
        async with client(api, "127.0.0.2") as guesser, client(api, "127.0.0.1") as other:
            assert [await runs(guesser, BAD) for _ in range(3)] == [401, 401, 401]
            refused = await guesser.get("/v1/runs", headers={"Authorization": f"Bearer {BAD}"})
            body = problem(refused, 429)
            assert int(refused.headers["retry-after"]) >= 1
            assert "failed" in body["detail"]
            assert await runs(guesser, None) == 429  # no token at all is a failure too
            assert await runs(guesser, BAD, **{"X-Forwarded-For": "198.51.100.9"}) == 429
            # A good token never seen valid here is not told apart from a guess.
            assert await runs(guesser, good) == 429
            assert await runs(other, BAD) == 401
            assert await runs(other, good) == 200


async def test_a_token_known_good_keeps_working_from_a_blocked_address(
    each_store_url: str,
) -> None:
    async with served(make_app(each_store_url), LIMITED) as api:
        good = await api.token("read")
        async with client(api, "127.0.0.3") as shared:
            assert await runs(shared, good) == 200  # known good from now on, in this process
            assert [await runs(shared, BAD) for _ in range(4)] == [401, 401, 401, 429]
            assert await runs(shared, good) == 200
            # Known good is not a pass for ever: the token is still looked up, refused once
            # revoked, and then forgotten as good.
            revoked = await api.call("DELETE", f"/v1/tokens/{good.split('_')[1]}")
            assert revoked.status_code == 200, revoked.text
            assert await runs(shared, good) == 401
            assert await runs(shared, good) == 429


async def test_forwarded_for_is_believed_from_a_trusted_proxy_only(each_store_url: str) -> None:
    settings = replace(LIMITED, trusted_proxies=("127.0.0.1",))
    async with (
        served(make_app(each_store_url), settings) as api,
        client(api, "127.0.0.1") as proxy,
        client(api, "127.0.0.4") as direct,
    ):
        one = {"X-Forwarded-For": "203.0.113.1"}
        two = {"X-Forwarded-For": "198.51.100.7, 203.0.113.2"}  # rightmost is the client
        assert [await runs(proxy, BAD, **one) for _ in range(4)] == [401, 401, 401, 429]
        assert await runs(proxy, BAD, **two) == 401
        # 127.0.0.4 is no proxy: its X-Forwarded-For is its own word and changes nothing.
        spoofed = [await runs(direct, BAD, **{"X-Forwarded-For": f"192.0.2.{n}"}) for n in range(4)]
        assert spoofed == [401, 401, 401, 429]
