"""The `cronbus namespaces` commands: list, create and delete namespaces.

Jobs, runs, topics, subscriptions and workers live in a namespace (``default`` unless told);
resource commands choose one with ``--namespace`` (or ``CRONBUS_NAMESPACE``). Creating and
deleting namespaces needs admin over every namespace; a namespace still holding anything, and
``default``, cannot be deleted.
"""

from __future__ import annotations

import click

from . import render
from .connect import Where, run_services, where_options
from .loading import CronbusGroup
from .subs_render import table

_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)


@click.group(cls=CronbusGroup)
def namespaces() -> None:
    """List, create and delete namespaces (tenants, application groups)."""


@namespaces.command("list")
@where_options(namespace_option=False)
@_json_option
def list_namespaces(where: Where, as_json: bool) -> None:
    """List the namespaces (through a server: those its token may use), by name."""
    found = run_services(where, lambda services: services.namespaces.list())
    if as_json:
        render.print_json(
            [{"name": ns.name, "created_at": render.iso(ns.created_at)} for ns in found]
        )
    elif not found:
        click.echo("no namespaces")
    else:
        rows = table("NAME", "CREATED (UTC)")
        for ns in found:
            rows.add_row(ns.name, render.human_time(ns.created_at))
        render.console().print(rows)


@namespaces.command("create")
@click.argument("name", metavar="NAME")
@where_options(namespace_option=False)
@_json_option
def create_namespace(name: str, where: Where, as_json: bool) -> None:
    """Create an empty namespace NAME (lower-case letters, digits, '_', '.', '-')."""
    created = run_services(where, lambda services: services.namespaces.create(name))
    if as_json:
        render.print_json({"name": created.name, "created_at": render.iso(created.created_at)})
    else:
        click.echo(f"namespace {created.name} created")


@namespaces.command("delete")
@click.argument("name", metavar="NAME")
@where_options(namespace_option=False)
@_json_option
def delete_namespace(name: str, where: Where, as_json: bool) -> None:
    """Delete the namespace NAME: it must hold nothing (no job, run, topic, subscription or
    live token); `default` always stays."""
    run_services(where, lambda services: services.namespaces.delete(name))
    if as_json:
        render.print_json({"name": name, "deleted": True})
    else:
        click.echo(f"namespace {name} deleted")
