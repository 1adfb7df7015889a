"""The `cronbus tokens` commands: create an API token (shown once), list tokens, revoke one.

A token is ``cb_<id>_<secret>``: the id is public (lists, the audit log), the secret is shown
by ``create`` once and stored only as a hash. A token has a scope (``read`` changes nothing,
``write`` changes resources, ``admin`` also manages tokens and namespaces) and the namespaces
it may act in (``*``: every one). Managing tokens needs admin over every namespace: local
commands on the store have it; through a server, the token sent with ``--token`` must.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import click

from ..admin_records import TokenRecord
from ..services.access import Scope
from . import render
from .connect import AnyServices, Where, run_services, where_options
from .loading import CronbusGroup
from .subs_render import table

_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)
_COLUMNS = (
    "ID",
    "NAME",
    "SCOPE",
    "NAMESPACES",
    "PAYLOADS",
    "STATE",
    "CREATED (UTC)",
    "EXPIRES",
    "LAST USED",
)


@click.group(cls=CronbusGroup)
def tokens() -> None:
    """Create, list and revoke API tokens (admin).

    Clients send a token as `Authorization: Bearer TOKEN` (the CLI with --token or
    CRONBUS_TOKEN, next to --url).
    """


@tokens.command("create")
@click.option(
    "--scope",
    type=click.Choice([s.value for s in Scope]),
    required=True,
    help="read changes nothing; write changes resources; admin also manages tokens and namespaces.",
)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    required=True,
    metavar="NAME",
    help="A namespace the token may act in; repeat it for several, or '*' for every one.",
)
@click.option("--name", metavar="TEXT", help="What the token is for (shown in lists).")
@click.option(
    "--expires",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Seconds until the token expires. Default: never.",
)
@click.option(
    "--payloads/--no-payloads",
    default=True,
    show_default=True,
    help="Whether the token may read runs' arguments and results; with --no-payloads they "
    "read [redacted] (and it cannot search by them).",
)
@where_options(namespace_option=False)
@_json_option
def create_token(
    scope: str,
    namespaces: tuple[str, ...],
    name: str | None,
    expires: float | None,
    payloads: bool,
    where: Where,
    as_json: bool,
) -> None:
    """Create a token and print it, once: it is stored only hashed and never shown again.

    Without --json, stdout holds the token alone (`TOKEN=$(cronbus tokens create ...)`) and
    stderr says what it is.
    """
    chosen = [part.strip() for value in namespaces for part in value.split(",") if part.strip()]
    label = name if name is not None else f"{scope} token for {', '.join(chosen)}"

    async def create(services: AnyServices) -> tuple[TokenRecord, str]:
        return await services.tokens.create(
            label, scope, chosen, expires_in=expires, payloads=payloads
        )

    record, text = run_services(where, create)
    if as_json:
        render.print_json({**token_json(record), "token": text})
        return
    click.echo(text)
    hidden = "" if record.payloads else ", payloads redacted"
    click.echo(
        f"token {record.id} ({record.scope} in {', '.join(record.namespaces)}{hidden}): store "
        "it now, it is not shown again",
        err=True,
    )


@tokens.command("list")
@where_options(namespace_option=False)
@_json_option
def list_tokens(where: Where, as_json: bool) -> None:
    """List tokens, oldest first, revoked and expired ones too (never their secret)."""
    found = run_services(where, lambda services: services.tokens.list())
    if as_json:
        render.print_json([token_json(record) for record in found])
    elif not found:
        click.echo("no tokens")
    else:
        _print_tokens(found)


@tokens.command("revoke")
@click.argument("token_id", metavar="ID")
@where_options(namespace_option=False)
@_json_option
def revoke_token(token_id: str, where: Where, as_json: bool) -> None:
    """Revoke the token ID (the part after `cb_` shown by `tokens list`): it is refused from
    now on. Revoking it again changes nothing."""
    record = run_services(where, lambda services: services.tokens.revoke(token_id))
    if as_json:
        render.print_json(token_json(record))
    else:
        click.echo(f"token {record.id} revoked")


def token_state(record: TokenRecord, now: float) -> str:
    """``active``, ``revoked`` or ``expired``."""
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    return "active"


def token_json(record: TokenRecord) -> dict[str, Any]:
    """A token as a JSON object (its id, never its secret or hash)."""
    return {
        "id": record.id,
        "name": record.name,
        "scope": record.scope,
        "namespaces": list(record.namespaces),
        "payloads": record.payloads,
        "state": token_state(record, time.time()),
        "created_at": render.iso(record.created_at),
        "created_by": record.created_by,
        "expires_at": render.iso(record.expires_at),
        "revoked_at": render.iso(record.revoked_at),
        "last_used_at": render.iso(record.last_used_at),
    }


def _print_tokens(found: Sequence[TokenRecord]) -> None:
    now = time.time()
    rows = table(*_COLUMNS, wrap=("NAME",))
    for record in found:
        rows.add_row(
            record.id,
            record.name,
            record.scope,
            ",".join(record.namespaces),
            "yes" if record.payloads else "redacted",
            token_state(record, now),
            render.human_time(record.created_at),
            render.human_time(record.expires_at) or "never",
            render.human_time(record.last_used_at) or "-",
        )
    render.console().print(rows)
