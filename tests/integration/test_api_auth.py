"""Tokens at the door, over real HTTP: 401 without a valid token, 403 for a scope or namespace
the token lacks, the namespace a request acts in, and 429 past a token's rate."""

from __future__ import annotations

from pathlib import Path

from cronbus.api import ApiSettings
from cronbus.services import Services
from integration.test_api_support import Api, api, make_app, problem, served, until

__all__ = ["api"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_unknown_malformed_revoked_and_expired_tokens_are_401(api: Api) -> None:
    token = await api.token("read")
    assert (await api.client.get("/v1/runs", headers=bearer(token))).status_code == 200
    forged = token[:-4] + ("aaaa" if not token.endswith("aaaa") else "bbbb")
    for text in (forged, "cb_nothex_x", "x" * 500, "Bearer"):
        response = await api.client.get("/v1/runs", headers=bearer(text))
        problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")
    token_id = token.split("_")[1]
    await Services(api.app).tokens.revoke(token_id)
    revoked = problem(await api.client.get("/v1/runs", headers=bearer(token)), 401)
    assert "revoked" in revoked["detail"]
    _, brief = await Services(api.app).tokens.create("brief", "read", ["*"], expires_in=0.05)

    async def expired() -> bool:
        response = await api.client.get("/v1/runs", headers=bearer(brief))
        return response.status_code == 401 and "expired" in response.json()["detail"]

    await until(expired)


async def test_read_scope_changes_nothing(api: Api) -> None:
    read = await api.headers("read")
    refused = await api.client.post("/v1/runs", json={"task": "noop"}, headers=read)
    assert "scope write" in problem(refused, 403)["detail"]
    assert (await api.call("GET", "/v1/runs")).json()["items"] == []
    write = await api.headers("write")
    created = await api.client.post("/v1/runs", json={"task": "noop"}, headers=write)
    assert created.status_code == 201
    tokens = await api.client.get("/v1/tokens", headers=write)
    assert "scope admin" in problem(tokens, 403)["detail"]


async def test_a_token_acts_only_in_its_namespaces(api: Api) -> None:
    await Services(api.app).namespaces.create("shop")
    shop = await api.headers("write", ["shop"])
    # Its only namespace is the default one for it.
    made = await api.client.post("/v1/runs", json={"task": "noop"}, headers=shop)
    assert made.status_code == 201
    assert made.json()["run"]["namespace"] == "shop"
    elsewhere = await api.client.get("/v1/runs", params={"namespace": "default"}, headers=shop)
    assert "namespace 'default'" in problem(elsewhere, 403)["detail"]
    by_header = await api.client.get("/v1/runs", headers={**shop, "X-Cronbus-Namespace": "default"})
    problem(by_header, 403)
    # An admin of every namespace sees shop's run only when it asks for shop.
    assert (await api.call("GET", "/v1/runs")).json()["items"] == []
    seen = await api.call("GET", "/v1/runs", params={"namespace": "shop"})
    assert [r["id"] for r in seen.json()["items"]] == [made.json()["run"]["id"]]
    # A run of another namespace is not found, not forbidden: its existence stays unsaid.
    problem(await api.call("GET", f"/v1/runs/{made.json()['run']['id']}"), 404)


async def test_namespace_choice_is_checked(api: Api) -> None:
    bad = await api.call("GET", "/v1/runs", params={"namespace": "Not Valid"})
    problem(bad, 422, "namespace")
    problem(await api.call("GET", "/v1/runs", headers={"X-Cronbus-Namespace": "A B"}), 422)
    # The query says which when both do: an admin of every namespace may read "shop".
    await api.call("POST", "/v1/namespaces", json={"name": "shop"})
    both = await api.call(
        "GET", "/v1/runs", params={"namespace": "shop"}, headers={"X-Cronbus-Namespace": "x"}
    )
    assert both.status_code == 200
    read_shop = await api.headers("read", ["shop"])
    refused = await api.client.get(
        "/v1/runs",
        params={"namespace": "default"},
        headers={**read_shop, "X-Cronbus-Namespace": "shop"},
    )
    problem(refused, 403)
    long = await api.call("GET", "/v1/runs", params={"namespace": "n" * 64})
    problem(long, 422, "namespace")


async def test_rate_limit_is_per_token_with_retry_after(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'api.db'}")
    async with served(app, ApiSettings(rate=6, burst=3)) as api:
        first = await api.headers("read")
        for _ in range(3):
            assert (await api.client.get("/v1/runs", headers=first)).status_code == 200
        limited = await api.client.get("/v1/runs", headers=first)
        assert "too many requests" in problem(limited, 429)["detail"]
        # 6 a minute: one request every 10 s comes back.
        assert 1 <= int(limited.headers["retry-after"]) <= 10
        # Another token has its own bucket; the open doors have none.
        other = await api.headers("read", ["default"])
        assert (await api.client.get("/v1/runs", headers=other)).status_code == 200
        for _ in range(5):
            assert (await api.client.get("/v1/health")).status_code == 200
