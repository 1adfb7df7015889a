"""Console section: administration (tokens, namespaces and the audit log); admins of every
namespace only, other sessions get a 403 page.

A new token is shown once, on the page that answers its creation form (never in a URL, which
browsers keep in their history), and that page is not cached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import Form, Request, Response

from ...admin_records import TokenRecord
from ...errors import ConflictError, InvalidArgumentError
from ...services import Scope
from ...validation import shorten
from ..errors import status_of
from ..session import Console, Session
from ..templates import page
from .common import console_router, done

router = console_router()

AUDIT_SHOWN = 50
"""Audit log entries on the tokens page."""
_SPLIT = re.compile(r"[\s,]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenForm:
    """What the token form holds (kept when a creation is refused)."""

    name: str = ""
    scope: str = Scope.READ.value
    namespaces: str = "default"
    expires_in: str = ""
    payloads: bool = True


def require_admin(session: Session) -> None:
    """Refuse (a 403 page) unless the session is an admin of every namespace."""
    session.access.require(Scope.ADMIN, None)


def parse_namespaces(text: str) -> list[str]:
    """Namespaces typed in the form: separated by commas or spaces."""
    return [part for part in _SPLIT.split(text) if part]


def parse_expires(text: str) -> float | None:
    """The form's ``expires in`` seconds (None when left empty: the token never expires)."""
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise InvalidArgumentError(
            f"expires in must be a number of seconds, got {shorten(text)}", field="expires_in"
        ) from None


async def tokens_page(
    request: Request,
    session: Session,
    *,
    form: TokenForm | None = None,
    created: TokenRecord | None = None,
    token: str | None = None,
    error: str = "",
    status: int = 200,
) -> Response:
    """The tokens page: the tokens, the creation form, and the newest audit entries."""
    services = session.services
    tokens = await services.tokens.list()
    audit = await services.audit.list(limit=AUDIT_SHOWN)
    return page(
        request,
        session,
        "tokens.html",
        status=status,
        title="Tokens",
        nav="tokens",
        tokens=tokens,
        audit=audit.items,
        form=form or TokenForm(),
        scopes=[s.value for s in Scope],
        created=created,
        token=token,
        error=error,
        now=services.context.now(),
    )


@router.get("/tokens")
async def tokens(request: Request, session: Console) -> Response:
    """Every token (revoked and expired ones too), a form to create one, the audit log."""
    require_admin(session)
    return await tokens_page(request, session)


@router.post("/tokens")
async def create_token(
    request: Request,
    session: Console,
    name: Annotated[str, Form()] = "",
    scope: Annotated[str, Form()] = "",
    namespaces: Annotated[str, Form()] = "",
    expires_in: Annotated[str, Form()] = "",
    payloads: Annotated[str | None, Form()] = None,
) -> Response:
    """Create a token and show it, this once, on the page that answers."""
    require_admin(session)
    form = TokenForm(
        name=name,
        scope=scope,
        namespaces=namespaces,
        expires_in=expires_in,
        payloads=payloads is not None,
    )
    try:
        record, text = await session.services.tokens.create(
            name.strip(),
            scope,
            parse_namespaces(namespaces),
            expires_in=parse_expires(expires_in),
            payloads=form.payloads,
        )
    except InvalidArgumentError as exc:
        return await tokens_page(request, session, form=form, error=str(exc), status=status_of(exc))
    return await tokens_page(request, session, created=record, token=text)


@router.post("/tokens/{token_id}/revoke")
async def revoke_token(session: Console, token_id: str) -> Response:
    """Revoke a token: requests carrying it are refused from now on."""
    record = await session.services.tokens.revoke(token_id)
    return done("/tokens", f"token {record.id} ({record.name}) revoked")


async def namespaces_page(
    request: Request, session: Session, *, error: str = "", status: int = 200, name: str = ""
) -> Response:
    """The namespaces page: every namespace, the creation form, delete buttons."""
    found = await session.services.namespaces.list()
    return page(
        request,
        session,
        "namespaces.html",
        status=status,
        title="Namespaces",
        nav="namespaces",
        namespaces=found,
        error=error,
        typed=name,
    )


@router.get("/namespaces")
async def namespaces(request: Request, session: Console) -> Response:
    """Every namespace, with a form to create one and a delete button for each empty one."""
    require_admin(session)
    return await namespaces_page(request, session)


@router.post("/namespaces")
async def create_namespace(
    request: Request, session: Console, name: Annotated[str, Form()] = ""
) -> Response:
    """Create a namespace."""
    require_admin(session)
    try:
        created = await session.services.namespaces.create(name.strip())
    except (InvalidArgumentError, ConflictError) as exc:
        return await namespaces_page(
            request, session, error=str(exc), status=status_of(exc), name=name
        )
    return done("/namespaces", f"namespace {created.name} created")


@router.post("/namespaces/{name}/delete")
async def delete_namespace(request: Request, session: Console, name: str) -> Response:
    """Delete an empty namespace; a refusal says what it still holds."""
    require_admin(session)
    try:
        await session.services.namespaces.delete(name)
    except (InvalidArgumentError, ConflictError) as exc:
        return await namespaces_page(request, session, error=str(exc), status=status_of(exc))
    return done("/namespaces", f"namespace {name} deleted")
