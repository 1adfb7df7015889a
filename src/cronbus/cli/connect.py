"""Where a resource command's services come from: the store itself, or a cronbus API server.

Every resource command takes ``--app``/``--store`` (the store, through local
:class:`~cronbus.services.Services`) and ``--url``/``--token`` (a server, through
:class:`~cronbus.client.RemoteServices`), and ``--namespace``. Both kinds of services have the
same methods and return the same records, so a command is written once, as a coroutine over
either, and prints the same thing whichever door it went through.

An explicit ``--store`` or ``--app`` on the command line beats a ``CRONBUS_URL`` from the
environment (the user named a store); both ``--url`` and ``--store`` on the command line is a
usage error, since they name two different places.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import click
from click.core import ParameterSource

from ..errors import InvalidArgumentError
from ..services import Services
from ..services.access import check_namespace
from ..services.pages import MAX_LIMIT, Page
from .loading import APP_HELP, STORE_HELP, resolve_app, run_with_app

if TYPE_CHECKING:
    # Imported when a command works through a server: httpx and pydantic cost every other
    # command a tenth of a second to import.
    from ..client import RemoteServices

    AnyServices: TypeAlias = Services | RemoteServices
    """The services a command works with: on the store, or over HTTP. Same methods, same
    records."""
else:
    AnyServices = Services  # only annotations name it, and they are not evaluated

T = TypeVar("T")

URL_VARIABLE = "CRONBUS_URL"
TOKEN_VARIABLE = "CRONBUS_TOKEN"
NAMESPACE_VARIABLE = "CRONBUS_NAMESPACE"
URL_HELP = (
    "Work through the cronbus API at this URL (e.g. http://127.0.0.1:8787) instead of on the "
    "store. Default: CRONBUS_URL."
)
TOKEN_HELP = "The API token sent with --url (Authorization: Bearer). Default: CRONBUS_TOKEN."
NAMESPACE_HELP = (
    "The namespace to act in. Default: CRONBUS_NAMESPACE, else the --app's namespace (with "
    "--url: the token's only namespace), else default."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Where:
    """Where a command works: a store (``app_spec``, ``store_url``) or a server (``url``)."""

    app_spec: str | None = None
    store_url: str | None = None
    url: str | None = None
    token: str | None = None
    namespace: str | None = None
    """None: the app's namespace (local), or CRONBUS_NAMESPACE else ``default`` (remote)."""

    @property
    def remote(self) -> bool:
        """True when the command talks to a server."""
        return self.url is not None


def _namespace(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_namespace(value)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc)) from None


def where_options(
    *, app_required: bool = False, namespace_option: bool = True
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Add ``--app``, ``--store``, ``--url``, ``--token`` and ``--namespace`` to a command,
    which receives them as one ``where`` argument (:class:`Where`).

    ``app_required``: the command needs the app's tasks when it works on the store (``defer``,
    ``jobs add``); through a server the server's app has them. ``namespace_option=False``
    leaves ``--namespace`` out, for commands that act on no one namespace (tokens) or take it
    in another sense.
    """

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def command(
            *args: Any,
            app_spec: str | None,
            store_url: str | None,
            url: str | None,
            token: str | None,
            **kwargs: Any,
        ) -> T:
            namespace = kwargs.pop("where_namespace", None)
            where = _where(app_spec, store_url, url, token, namespace)
            if app_required and not where.remote and where.app_spec is None:
                raise click.UsageError(
                    "Missing option '--app' (the app's tasks are needed; or work through a "
                    "server with --url)"
                )
            return fn(*args, where=where, **kwargs)

        options = [
            click.option(
                "--app", "app_spec", metavar="MODULE:ATTR", envvar="CRONBUS_APP", help=APP_HELP
            ),
            click.option("--store", "store_url", metavar="URL", help=STORE_HELP),
            click.option("--url", metavar="URL", envvar=URL_VARIABLE, help=URL_HELP),
            click.option("--token", metavar="TOKEN", envvar=TOKEN_VARIABLE, help=TOKEN_HELP),
        ]
        if namespace_option:
            options.append(
                click.option(
                    "--namespace",
                    "where_namespace",
                    metavar="NAME",
                    callback=_namespace,
                    help=NAMESPACE_HELP,
                )
            )
        decorated: Callable[..., T] = command
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return decorate


def _where(
    app_spec: str | None,
    store_url: str | None,
    url: str | None,
    token: str | None,
    namespace: str | None,
) -> Where:
    """The place the options name, refusing two places named on the command line."""
    ctx = click.get_current_context(silent=True)
    typed = {
        name
        for name in ("app_spec", "store_url", "url")
        if ctx is not None and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    if url is not None and not url.strip():
        url = None  # CRONBUS_URL= (set but empty) means no server
    if url is not None:
        if "url" in typed and typed & {"app_spec", "store_url"}:
            raise click.UsageError(
                "--url works through a server (its app and store): --app and --store do not "
                "go with it"
            )
        if typed & {"app_spec", "store_url"}:
            url = None  # a store named on the command line beats CRONBUS_URL
        else:
            app_spec = store_url = None  # CRONBUS_APP serves local commands only
    if url is None:
        token = None  # a token is for servers; local commands act as the store's owner
    return Where(app_spec=app_spec, store_url=store_url, url=url, token=token, namespace=namespace)


def run_services(
    where: Where, work: Callable[[AnyServices], Awaitable[T]], *, create: bool | None = None
) -> T:
    """Await ``work(services)`` on a fresh event loop: local services on the opened store, or
    remote ones on the server. ``create`` is :func:`~.loading.run_with_app`'s."""
    if where.url is not None:
        namespace = where.namespace or _env_namespace()
        return asyncio.run(_remote(where.url, where.token, namespace, work))
    app = resolve_app(where.app_spec, where.store_url)
    if where.namespace is not None:
        app.use_namespace(where.namespace)  # the app's code jobs and tasks live there too
    return run_with_app(
        app, lambda opened: work(Services(opened, namespace=where.namespace)), create=create
    )


async def _remote(
    url: str, token: str | None, namespace: str | None, work: Callable[[AnyServices], Awaitable[T]]
) -> T:
    from ..client import RemoteServices

    async with RemoteServices(url, token, namespace) as services:
        return await work(services)


def _env_namespace() -> str | None:
    """CRONBUS_NAMESPACE, checked; None when unset, so the server chooses (the token's only
    namespace, else ``default``)."""
    raw = os.environ.get(NAMESPACE_VARIABLE, "").strip()
    if not raw:
        return None
    try:
        return check_namespace(raw)
    except InvalidArgumentError as exc:
        raise click.UsageError(f"{NAMESPACE_VARIABLE}: {exc}") from None


async def collect(
    fetch: Callable[[int, str | None], Awaitable[Page[T]]],
    limit: int,
    cursor: str | None = None,
) -> list[T]:
    """Up to ``limit`` items of a listing, read page by page (a page holds at most
    :data:`~cronbus.services.pages.MAX_LIMIT`), from ``cursor`` on."""
    items: list[T] = []
    while len(items) < limit:
        page = await fetch(min(MAX_LIMIT, limit - len(items)), cursor)
        items.extend(page.items)
        if page.next is None or not page.items:
            break
        cursor = page.next
    return items[:limit]
