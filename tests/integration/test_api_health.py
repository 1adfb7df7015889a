"""The API's open doors: health, readiness and the OpenAPI document need no token; unknown
routes and methods, and bodies over the limit, answer as problem documents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from cronbus.api import ApiSettings
from integration.test_api_support import Api, api, make_app, problem, served

__all__ = ["api"]


async def test_health_and_readiness_need_no_token(api: Api) -> None:
    health = await api.client.get("/v1/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    ready = await api.client.get("/v1/ready")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert ready.json()["schema_version"] >= 1


async def test_openapi_document_lists_every_resource(api: Api) -> None:
    response = await api.client.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    paths = set(document["paths"])
    for path in ("/v1/runs", "/v1/jobs", "/v1/dead-letters", "/v1/workers", "/v1/topics"):
        assert path in paths
    problem_schema = document["components"]["schemas"]["Problem"]
    assert {"type", "title", "status"} <= set(problem_schema["properties"])
    assert document["components"]["securitySchemes"]["token"]["scheme"] == "bearer"


async def test_unknown_route_and_method_are_problems(api: Api) -> None:
    problem(await api.client.get("/docs"), 404)  # no page needs no token but these
    missing = problem(await api.client.get("/v1/nothing-here"), 404)
    assert missing["instance"] == "/v1/nothing-here"
    wrong = await api.client.delete("/v1/health")
    body = problem(wrong, 405)
    assert wrong.headers["allow"] == "GET"
    assert "GET" in body["detail"]


async def test_no_token_is_401_with_bearer_challenge(api: Api) -> None:
    response = await api.client.get("/v1/runs")
    problem(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")
    basic = await api.client.get("/v1/runs", headers={"Authorization": "Basic YTpi"})
    problem(basic, 401)
    assert basic.headers["www-authenticate"].startswith("Bearer")


async def test_bodies_over_the_limit_are_413(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'api.db'}")
    async with served(app, ApiSettings(rate=1_000_000, max_body=1000)) as api:
        declared = await api.client.post("/v1/runs", content=b"x" * 1001)
        assert "larger than 1000 bytes" in problem(declared, 413)["detail"]

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(4):
                yield b"y" * 400

        streamed = await api.client.post("/v1/runs", content=chunks())  # chunked: no length
        problem(streamed, 413)
        # Within the limit the request goes on (to the token check).
        small = await api.client.post("/v1/runs", content=b"{}")
        problem(small, 401)
