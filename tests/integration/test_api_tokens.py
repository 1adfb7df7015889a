"""``/v1/tokens`` and ``/v1/namespaces`` over real HTTP (admin): a token's text is shown once
and works at once; lists show no text and no hash; a revoked token is refused; namespaces are
created, listed as the token sees them, and deleted only when empty."""

from __future__ import annotations

from integration.test_api_support import Api, api, problem

__all__ = ["api"]


async def test_create_use_list_revoke(api: Api) -> None:
    created = await api.call(
        "POST", "/v1/tokens", json={"name": "ci", "scope": "write", "namespaces": ["default"]}
    )
    assert created.status_code == 201, created.text
    body = created.json()
    token = body["token"]
    assert token.startswith(f"cb_{body['id']}_")
    assert "hash" not in body
    assert created.headers["location"] == f"/v1/tokens/{body['id']}"
    mine = {"Authorization": f"Bearer {token}"}
    made = await api.client.post("/v1/runs", json={"task": "noop"}, headers=mine)
    assert made.status_code == 201
    listed = await api.call("GET", "/v1/tokens")
    assert token not in listed.text
    assert all("hash" not in t and "token" not in t for t in listed.json()["items"])
    ci = next(t for t in listed.json()["items"] if t["id"] == body["id"])
    assert (ci["name"], ci["scope"], ci["namespaces"]) == ("ci", "write", ["default"])
    revoked = await api.call("DELETE", f"/v1/tokens/{body['id']}")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    problem(await api.client.get("/v1/runs", headers=mine), 401)
    problem(await api.call("DELETE", "/v1/tokens/000000000000"), 404)


async def test_token_requests_are_checked(api: Api) -> None:
    cases = [
        ({"name": "x", "scope": "root", "namespaces": ["default"]}, "scope"),
        ({"name": "x", "scope": "read", "namespaces": []}, "namespaces"),
        ({"name": "x", "scope": "read", "namespaces": ["nowhere"]}, "namespaces"),
        ({"name": "x", "scope": "read", "namespaces": ["*", "default"]}, "namespaces"),
        ({"name": "x", "scope": "read", "expires_in": -5}, "expires_in"),
        ({"scope": "read"}, "name"),
    ]
    for body, field in cases:
        problem(await api.call("POST", "/v1/tokens", json=body), 422, field)
    write = await api.headers("write")
    refused = await api.client.post(
        "/v1/tokens", json={"name": "x", "scope": "admin"}, headers=write
    )
    problem(refused, 403)
    assert len((await api.call("GET", "/v1/tokens")).json()["items"]) == 2  # admin and write


async def test_namespaces(api: Api) -> None:
    created = await api.call("POST", "/v1/namespaces", json={"name": "shop"})
    assert created.status_code == 201
    assert created.json()["name"] == "shop"
    problem(await api.call("POST", "/v1/namespaces", json={"name": "shop"}), 409)
    problem(await api.call("POST", "/v1/namespaces", json={"name": "Shop!"}), 422, "name")
    names = [n["name"] for n in (await api.call("GET", "/v1/namespaces")).json()["items"]]
    assert names == ["default", "shop"]
    shop_only = await api.headers("read", ["shop"])
    seen = await api.client.get("/v1/namespaces", headers=shop_only)
    assert [n["name"] for n in seen.json()["items"]] == ["shop"]
    # In use (a live token, a run) it stays.
    problem(await api.call("DELETE", "/v1/namespaces/shop"), 409)
    problem(await api.call("DELETE", "/v1/namespaces/default"), 409)
    await api.call("POST", "/v1/namespaces", json={"name": "empty"})
    gone = await api.call("DELETE", "/v1/namespaces/empty")
    assert gone.status_code == 204
    problem(await api.call("DELETE", "/v1/namespaces/empty"), 404)
