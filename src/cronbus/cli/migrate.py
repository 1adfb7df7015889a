"""``cronbus migrate``: bring the store's schema up to date, or (``--check``) say whether it is.

Stores apply their migrations as they open unless their URL says ``migrate=false``; this
command is the step of its own that such deployments run before starting the new version.
Several at once are safe: each store migrates under a lock (an advisory lock on PostgreSQL, the
writers' lock on SQLite), so the second finds the work done.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from ..store import open_store
from ..store.migrations import Migrated, Migrator, SchemaVersions, newer_error
from . import render
from .loading import CliError, app_options, resolve_app
from .progress import progress, steps

PENDING_EXIT = 2
"""``--check``'s exit status when migrations are pending (1 stays for errors)."""


@click.command()
@click.option(
    "--check",
    is_flag=True,
    help=f"Apply nothing: exit with status {PENDING_EXIT} when migrations are pending, 0 if none.",
)
@app_options()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
def migrate(check: bool, app_spec: str | None, store_url: str | None, as_json: bool) -> None:
    """Apply the store's pending migrations; print its schema version before and after.

    The store is the one --store names, else the --app's, else CRONBUS_STORE, else
    sqlite:///./cronbus.db; its URL's migrate=false does not stop this command. Exit status:
    0 when the schema is (now) up to date, 1 on an error (a schema newer than this cronbus is
    one), and with --check 2 when migrations are pending.
    """
    store = open_store(resolve_app(app_spec, store_url).store_url)
    if not isinstance(store, Migrator):
        raise CliError(f"the store {type(store).__name__} cannot be migrated by this command")
    if check:
        versions = asyncio.run(store.schema_versions())
        _show_check(versions, as_json)
        if versions.pending:
            raise click.exceptions.Exit(PENDING_EXIT)
    else:
        with progress("migrating", quiet=as_json) as bar:
            migrated = asyncio.run(store.migrate(steps(bar)))
        _show_migrated(migrated, as_json)


def _show_check(versions: SchemaVersions, as_json: bool) -> None:
    if versions.current > versions.latest:
        raise newer_error(versions.store, versions.current, versions.latest)
    if as_json:
        document: dict[str, Any] = {
            "store": versions.store,
            "current": versions.current,
            "latest": versions.latest,
            "pending": versions.pending,
        }
        render.print_json(document)
    elif versions.pending:
        plural = "s" if versions.pending > 1 else ""
        click.echo(
            f"{versions.store}: schema version {versions.current}, this cronbus needs "
            f"{versions.latest}: {versions.pending} migration{plural} pending "
            "(run `cronbus migrate`)"
        )
    else:
        click.echo(f"{versions.store}: schema version {versions.current}, up to date")


def _show_migrated(migrated: Migrated, as_json: bool) -> None:
    if as_json:
        document: dict[str, Any] = {
            "store": migrated.store,
            "before": migrated.before,
            "after": migrated.after,
            "applied": list(migrated.applied),
        }
        render.print_json(document)
    elif migrated.applied:
        applied = ", ".join(migrated.applied)
        click.echo(
            f"{migrated.store}: schema version {migrated.before} -> {migrated.after} "
            f"(applied {applied})"
        )
    else:
        click.echo(
            f"{migrated.store}: schema version {migrated.before} -> {migrated.after} "
            "(up to date, nothing to apply)"
        )
