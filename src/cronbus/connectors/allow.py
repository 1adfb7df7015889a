"""What the built-in file and database connectors may touch: the operator's allow lists.

A connector is defined by whoever holds a ``write`` token, but it runs on a worker with the
worker's rights; so the files and databases it reaches are the operator's choice, never the
connector's. Each rule is one function, called when a connector is created (every door goes
through :class:`~cronbus.services.connectors.ConnectorsService`) and again each time a task
opens its file or database, because a symlink or a directory can change after the create.

- :func:`allowed_file`: ``file-source`` and ``file-sink`` paths must be absolute, without
  ``..``, and, once every symlink is followed, inside a directory of
  ``CRONBUS_CONNECTOR_FILES`` (``os.pathsep``-separated; none by default: file connectors are
  refused).
- :func:`allowed_database`: ``sql-source`` and ``postgres-sink`` URLs must name a database of
  ``CRONBUS_CONNECTOR_DATABASES`` (URLs or DSNs separated by whitespace; none by default),
  compared by :func:`database_key` (scheme, host, port and database name, or the resolved file
  of an SQLite database; users, passwords and options ignored), and never the store's own
  database, even when listed: its tables hold other namespaces' secrets.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import ConnectorNotAllowedError, InvalidArgumentError
from ..validation import shorten

if TYPE_CHECKING:
    from ..app import App

FILES_VARIABLE = "CRONBUS_CONNECTOR_FILES"
DATABASES_VARIABLE = "CRONBUS_CONNECTOR_DATABASES"
_LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1", "[::1]"})
"""Host spellings of this machine's server: one key, so ``localhost`` cannot pass for another
server than ``127.0.0.1`` (or a UNIX socket) in the store check."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reach:
    """The files and databases connectors may touch, and the store they must never touch."""

    files: tuple[str, ...] = ()
    """Directories (absolute) under which file connectors may read and write."""
    databases: tuple[str, ...] = ()
    """Database URLs or DSNs that database connectors may read and write."""
    store: str | None = None
    """The cronbus store's URL: refused even when listed."""

    @classmethod
    def of(cls, app: App) -> Reach:
        """The reach of ``app``'s connectors: its settings' lists, and its store."""
        settings = app.settings
        return cls(
            files=settings.connector_files,
            databases=settings.connector_databases,
            store=app.store_url,
        )


NOWHERE = Reach()
"""No file and no database: what a connector built without a reach may touch."""


@dataclass(frozen=True, slots=True)
class DatabaseKey:
    """Which database a URL names, whoever connects: ``where`` is the host (or the resolved
    file of an SQLite database)."""

    scheme: str
    where: str
    port: str
    name: str


def not_allowed(field: str, message: str) -> ConnectorNotAllowedError:
    """The refusal of ``field``, saying why."""
    return ConnectorNotAllowedError(f"{field}: {message}", field=field)


def allowed_file(path: str, reach: Reach, field: str = "config.path") -> str:
    """The resolved (symlink-free) form of ``path`` when a file connector may use it; else
    :class:`~cronbus.errors.ConnectorNotAllowedError` naming ``field``."""
    if not os.path.isabs(path):
        raise not_allowed(field, f"must be an absolute path, not {shorten(path)}")
    if ".." in PurePath(path).parts:
        raise not_allowed(field, f"must not contain '..', not {shorten(path)}")
    if not reach.files:
        raise not_allowed(
            field,
            f"file connectors are switched off: no directory is allowed ({FILES_VARIABLE} is "
            "empty; the operator lists the directories connectors may use)",
        )
    resolved = os.path.realpath(path)
    for directory in reach.files:
        root = os.path.realpath(directory)
        if resolved != root and os.path.commonpath([resolved, root]) == root:
            return resolved
    shown = shorten(path) if resolved == path else f"{shorten(path)} (resolved: {resolved})"
    allowed = os.pathsep.join(reach.files)
    raise not_allowed(
        field, f"{shown} is outside the directories file connectors may use ({allowed})"
    )


def open_allowed(path: str, reach: Reach, flags: int, mode: int = 0o666) -> int:
    """A file descriptor of ``path`` opened with ``flags``, after :func:`allowed_file`: the
    resolved path is opened, refusing a symlink put in its place since (``O_NOFOLLOW``)."""
    resolved = allowed_file(path, reach)
    nofollow = getattr(os, "O_NOFOLLOW", 0)  # POSIX; os.open's descriptors are not inherited
    binary = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
    try:
        return os.open(resolved, flags | nofollow | binary, mode)
    except OSError as exc:
        if nofollow and os.path.islink(resolved):
            raise not_allowed("config.path", f"{path} became a symlink; not followed") from exc
        raise


def allowed_database(url: str, reach: Reach, field: str = "config.url") -> DatabaseKey:
    """The key of the database ``url`` names when a database connector may use it; else
    :class:`~cronbus.errors.ConnectorNotAllowedError` naming ``field``. The store's own
    database is refused even when listed."""
    key = database_key(url, field)
    if reach.store is not None and _same_database(key, _store_key(reach.store)):
        raise not_allowed(
            field, "is the cronbus store's own database: connectors never read or write it"
        )
    if not reach.databases:
        raise not_allowed(
            field,
            f"database connectors are switched off: no database is allowed "
            f"({DATABASES_VARIABLE} is empty; the operator lists the databases connectors "
            "may use)",
        )
    if key not in {database_key(entry, DATABASES_VARIABLE) for entry in reach.databases}:
        # The list is not shown: its entries may hold passwords.
        raise not_allowed(
            field, f"is not one of the databases connectors may use ({DATABASES_VARIABLE})"
        )
    return key


def database_key(url: str, field: str = "config.url") -> DatabaseKey:
    """Which database ``url`` (an ``sqlite:///`` or ``postgresql://`` URL, or a libpq DSN)
    names; :class:`~cronbus.errors.InvalidArgumentError` naming ``field`` when it names none."""
    text = url.strip()
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if scheme == "sqlite":
        return _sqlite_key(text, field)
    if scheme not in ("", "postgresql", "postgres"):
        raise InvalidArgumentError(
            f"{field}: not an sqlite:/// or postgresql:// URL: {_hidden(text)}", field=field
        )
    # Imported here: a command on a SQLite store loads no PostgreSQL package (test_cli_imports).
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(text)
    except psycopg.Error as exc:
        # libpq's message quotes no password; the value is not shown (it may hold one).
        raise InvalidArgumentError(f"{field}: {exc}".strip(), field=field) from None
    # hostaddr is where libpq really connects when given; host is then only a name.
    host = str(params.get("hostaddr") or params.get("host") or "").lower()
    where = "localhost" if host in _LOCAL_HOSTS or host.startswith("/") else host
    name = str(params.get("dbname") or params.get("user") or "")
    service = params.get("service")
    if service:
        # A service file can point anywhere: the service's name is then part of the key.
        where = f"{where}?service={service}"
    return DatabaseKey(
        scheme="postgresql", where=where, port=str(params.get("port") or "5432"), name=name
    )


def _sqlite_key(url: str, field: str) -> DatabaseKey:
    parts = urlsplit(url)
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if parts.netloc or not path:
        raise InvalidArgumentError(
            f"{field}: must be sqlite:///relative.db or sqlite:////absolute.db, not {shorten(url)}",
            field=field,
        )
    if ".." in PurePath(path).parts:
        raise not_allowed(field, f"must not contain '..', not {shorten(url)}")
    return DatabaseKey(scheme="sqlite", where=os.path.realpath(path), port="", name="")


def _store_key(store: str) -> DatabaseKey | None:
    """The store's database (None for one held in memory, which no connector can open)."""
    text = store.strip()
    if re.match(r"sqlite:/*:memory:", text):
        return None
    if text.startswith("sqlite"):
        # Not database_key: the store's own URL may say '..', which only connectors may not.
        parts = urlsplit(text)
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return DatabaseKey(scheme="sqlite", where=os.path.realpath(path), port="", name="")
    # Imported here: the store's URL module is only needed when there is a PostgreSQL store.
    from ..store.postgres.url import parse_url

    # The store's own options (schema=…) are not libpq's: its connection string is.
    return database_key(parse_url(text).conninfo)


def _same_database(key: DatabaseKey, store: DatabaseKey | None) -> bool:
    if store is None:
        return False
    if key.scheme == store.scheme == "sqlite" and os.path.exists(key.where):
        # The same file under another name (a hard link, a bind mount) is the store too.
        return os.path.exists(store.where) and os.path.samefile(key.where, store.where)
    return key == store


def _hidden(url: str) -> str:
    """A URL shown without what could be a password."""
    parts = urlsplit(url)
    if parts.password is None:
        return shorten(url)
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return shorten(parts._replace(netloc=netloc).geturl())


def split_files(raw: str) -> tuple[str, ...]:
    """``CRONBUS_CONNECTOR_FILES``'s directories (``os.pathsep``-separated, blanks dropped)."""
    return tuple(part.strip() for part in raw.split(os.pathsep) if part.strip())


def split_databases(raw: str) -> tuple[str, ...]:
    """``CRONBUS_CONNECTOR_DATABASES``'s entries, separated by ``;`` or newlines (blanks
    dropped): URLs hold ``:`` and ``,`` (a multi-host libpq URL), and DSNs (``host=… dbname=…``)
    hold spaces, so neither can separate them."""
    return tuple(part.strip() for part in re.split(r"[;\n]", raw) if part.strip())


class Reaching:
    """What the built-in connectors that touch files or databases share: they are built with
    the :class:`Reach` they may use (nothing by default), and hand it to their tasks."""

    def __init__(self, reach: Reach = NOWHERE) -> None:
        self.reach = reach
