"""``/v1/tokens`` (admin): create a token (its text is shown once, in the answer), list, revoke.
``/v1/namespaces``: list (those the token sees), create and delete (admin)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Path, Response
from pydantic import Field

from ...admin_records import Namespace
from ..auth import Caller
from ..pagination import PageOut
from ..problems import responses
from ..schemas import StrictBody, TokenOut
from .common import router

tokens = router("tokens")
namespaces = router("namespaces")

TokenId = Annotated[str, Path(min_length=1, max_length=64, description="A token's public id.")]
NamespaceName = Annotated[str, Path(min_length=1, max_length=63, description="A namespace.")]


class TokenRequest(StrictBody):
    """A token to create."""

    name: str
    """What the token is for (shown in lists and the audit log)."""
    scope: str
    """``read``, ``write`` or ``admin``."""
    namespaces: Sequence[str] = ("default",)
    """The namespaces it may act in; ``["*"]`` is every one."""
    expires_in: float | None = None
    """Seconds until it expires (null: never)."""
    payloads: bool = True
    """Whether it may read runs' arguments and results (false: they read ``[redacted]``)."""


class CreatedToken(TokenOut):
    """A new token: its record and, this once, its text."""

    token: str = Field(description="The token itself; store it now, it is never shown again.")


class NamespaceRequest(StrictBody):
    """A namespace to create."""

    name: str


@tokens.post("/tokens", summary="Create a token", status_code=201, response_model=CreatedToken)
async def create_token(body: TokenRequest, response: Response, services: Caller) -> Any:
    """A new token; the answer holds its text, which is stored only hashed."""
    record, text = await services.tokens.create(
        name=body.name,
        scope=body.scope,
        namespaces=list(body.namespaces),
        expires_in=body.expires_in,
        payloads=body.payloads,
    )
    response.headers["Location"] = f"/v1/tokens/{record.id}"
    return CreatedToken.model_validate(
        {**TokenOut.model_validate(record).model_dump(), "token": text}
    )


@tokens.get("/tokens", summary="List tokens", response_model=PageOut[TokenOut])
async def list_tokens(services: Caller) -> dict[str, Any]:
    """Every token, oldest first, revoked and expired ones included (one page)."""
    found = [TokenOut.model_validate(t) for t in await services.tokens.list()]
    return {"items": found, "next": None, "next_cursor": None}


@tokens.delete(
    "/tokens/{token_id}",
    summary="Revoke a token",
    response_model=TokenOut,
    responses=responses(404),
)
async def revoke_token(token_id: TokenId, services: Caller) -> Any:
    """Revoke a token: it is refused from now on (revoking it again changes nothing)."""
    return TokenOut.model_validate(await services.tokens.revoke(token_id))


@namespaces.get("/namespaces", summary="List namespaces", response_model=PageOut[Namespace])
async def list_namespaces(services: Caller) -> dict[str, Any]:
    """The namespaces the token may use (every one for a token of ``*``), by name."""
    return {"items": await services.namespaces.list(), "next": None, "next_cursor": None}


@namespaces.post(
    "/namespaces", summary="Create a namespace", status_code=201, responses=responses(409)
)
async def create_namespace(
    body: NamespaceRequest, response: Response, services: Caller
) -> Namespace:
    """A new, empty namespace (admin)."""
    created = await services.namespaces.create(body.name)
    response.headers["Location"] = f"/v1/namespaces/{created.name}"
    return created


@namespaces.delete(
    "/namespaces/{name}",
    summary="Delete a namespace",
    status_code=204,
    responses=responses(404, 409),
)
async def delete_namespace(name: NamespaceName, services: Caller) -> Response:
    """Delete an empty namespace (admin); ``default`` and namespaces still in use stay (409)."""
    await services.namespaces.delete(name)
    return Response(status_code=204)
