"""What the Schemathesis run (test_api_schemathesis.py) found, each kept as a small regression
test over real HTTP on a seeded SQLite file: the request it sent, and what the answer must be
(a documented status, a problem document, never a 5xx)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apps.api_app import app as api_app
from integration.api_seed import Seeded, seed
from integration.test_api_support import Api, api, problem, served

__all__ = ["api"]


@pytest.fixture
async def seeded(tmp_path: Path) -> AsyncIterator[tuple[Api, Seeded]]:
    """The API over real HTTP on a freshly seeded SQLite file, with what the seed made."""
    api_app.use_store(f"sqlite:///{tmp_path / 'found.db'}")
    async with served(api_app) as api:
        yield api, await seed(api.app)


async def documented(api: Api, method: str, template: str) -> set[int]:
    """The statuses the OpenAPI document declares for an operation."""
    document = (await api.client.get("/openapi.json")).json()
    return {int(status) for status in document["paths"][template][method.lower()]["responses"]}


def auth(seeded: Seeded) -> dict[str, str]:
    """The seeded admin token's header."""
    return {"Authorization": f"Bearer {seeded.admin_token}"}


# Found by Schemathesis (negative bodies): bytes that are not UTF-8 in a JSON body made
# FastAPI answer 400 "There was an error parsing the body", a status no operation declares
# (a body that is UTF-8 but not JSON is a 422 naming "body", as it should be).
BODY_OPERATIONS = [
    ("POST", "/v1/jobs", "/v1/jobs"),
    ("PATCH", "/v1/jobs/nightly-report", "/v1/jobs/{name}"),
    ("POST", "/v1/runs", "/v1/runs"),
    ("POST", "/v1/dead-letters/requeue", "/v1/dead-letters/requeue"),
    ("POST", "/v1/topics/orders/events", "/v1/topics/{topic}/events"),
    ("PUT", "/v1/topics/orders/retention", "/v1/topics/{topic}/retention"),
    ("POST", "/v1/subscriptions", "/v1/subscriptions"),
    ("POST", "/v1/tokens", "/v1/tokens"),
]


@pytest.mark.parametrize(("method", "path", "template"), BODY_OPERATIONS)
async def test_a_body_that_is_not_utf8_is_a_documented_problem(
    api: Api, method: str, path: str, template: str
) -> None:
    response = await api.call(
        method, path, content=b"\xff\xfe{\x01", headers={"Content-Type": "application/json"}
    )
    assert response.status_code in await documented(api, method, template), response.text
    body = problem(response, response.status_code)
    assert response.status_code == 422
    assert "body" in [e["field"] for e in body["errors"]], body


async def test_a_body_that_is_not_json_names_the_body(api: Api) -> None:
    response = await api.call(
        "POST", "/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    problem(response, 422, "body")


def cursor_of(position: dict[str, object]) -> str:
    """A cursor as the services encode one (base64url JSON), holding ``position``."""
    text = json.dumps(position, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


# Found by hand after the Schemathesis run, probing what a user can type into a cursor: a
# cursor is opaque, but it is text a user can edit. One holding an id beyond 64 bits got past
# decode_cursor (it checks the type, not the range) and the store raised OverflowError (SQLite:
# "Python int too large to convert to SQLite INTEGER"): 500 on runs, operations and audit.
CURSOR_LISTINGS = [
    ("/v1/runs", "b"),
    ("/v1/operations", "b"),
    ("/v1/audit", "b"),
    ("/v1/subscriptions/hook/deliveries", "b"),
]


async def test_a_cursor_beyond_64_bits_is_refused_naming_the_cursor(
    seeded: tuple[Api, Seeded],
) -> None:
    api, made = seeded
    for value in (2**70, -(2**70), 2**63):
        for path, key in CURSOR_LISTINGS:
            response = await api.client.get(
                path, params={"cursor": cursor_of({key: value})}, headers=auth(made)
            )
            problem(response, 422, "cursor")
