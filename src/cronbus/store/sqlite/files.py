"""The SQLite store's file as a file: its schema version read without changing it, its identity
(device and inode), and whether it is still the database a process opened."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Iterator

from ...errors import StoreError
from .. import migrations

MEMORY = ":memory:"
BROKEN = frozenset({10, 11, 14, 26})
"""SQLite's primary result codes for a file that is broken, not busy: SQLITE_IOERR, _CORRUPT,
_CANTOPEN and _NOTADB."""
_NOTADB = 26


def read_versions(path: str, busy_timeout: float) -> migrations.SchemaVersions:
    """The schema version of the file at ``path`` (0 when it does not exist), changing nothing."""
    known = migrations.load("sqlite")
    latest = known[-1].version if known else 0
    if path == MEMORY or not os.path.exists(path):
        return migrations.SchemaVersions(store=store_name(path), current=0, latest=latest)
    try:
        # mode=rw: never creates the file (a file that is write-protected is still read).
        opened = sqlite3.connect(uri(path, "rw"), timeout=busy_timeout, uri=True)
        with contextlib.closing(opened) as conn:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cronbus_migrations'"
            ).fetchone()
            current = 0
            if found:
                (version,) = conn.execute("SELECT max(version) FROM cronbus_migrations").fetchone()
                current = int(version or 0)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the schema version of SQLite store {path!r}: {exc}") from exc
    return migrations.SchemaVersions(store=store_name(path), current=current, latest=latest)


def file_identity(path: str) -> tuple[int, int]:
    """The device and inode of the file at ``path`` (``OSError`` when there is none)."""
    found = os.stat(path)
    return found.st_dev, found.st_ino


def file_fault(path: str, identity: tuple[int, int], shown: str = "") -> str | None:
    """What is wrong with the store file at ``path``, opened as ``identity``; None if nothing.
    Messages name the file as ``shown`` (default: ``path``).

    A process keeps its file open: deleted or replaced, the file it writes to is one no other
    process sees; with its header overwritten, every other process is refused ("file is not a
    database") while this one goes on from its cache. Both are only seen by looking.
    """
    name = shown or path
    try:
        now = file_identity(path)
    except FileNotFoundError:
        return f"the store file {name} was deleted or replaced (no file is there now)"
    except OSError as exc:
        return f"the store file {name} cannot be read: {exc.strerror or exc}"
    if now != identity:
        return f"the store file {name} was deleted or replaced (another file is there now)"
    # Never open() the file itself: closing any descriptor of it drops every POSIX lock this
    # process holds on it (SQLite's "How To Corrupt", 2.2), and the next process to close the
    # store then thinks it is the last user, checkpoints and unlinks the WAL under the roles.
    # A second SQLite connection is safe: SQLite shares one inode's locks among a process's
    # connections and keeps a descriptor open while its locks are held.
    try:
        probe = sqlite3.connect(uri(path, "ro"), uri=True, timeout=0)
        with contextlib.closing(probe) as conn:
            read_schema_version(conn)
    except sqlite3.DatabaseError as exc:
        if is_not_a_database(exc):
            return not_a_database(name)
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in BROKEN:
            return f"the store file {name} cannot be read: {exc}"
        return None  # busy or locked: no fault, the roles wait or retry
    return None


def not_a_database(name: str) -> str:
    """The fault of a store file whose header was overwritten (SQLite: "file is not a
    database"), named as ``name``."""
    return f"the store file {name} is not a database any more (its header was overwritten)"


def is_not_a_database(exc: sqlite3.Error) -> bool:
    """True when SQLite refused the file itself as no database (SQLITE_NOTADB)."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == _NOTADB


def read_schema_version(conn: sqlite3.Connection) -> None:
    """Read the schema's version through ``conn``: cheap, and fails on a broken file."""
    conn.execute("PRAGMA schema_version").fetchone()


def uri(path: str, mode: str) -> str:
    """A ``file:`` URI for ``path`` that SQLite opens in ``mode`` (``ro``, ``rw``)."""
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode={mode}"


def store_name(path: str) -> str:
    """The store, for messages."""
    return f"SQLite store {path!r}"


def statements(script: str) -> Iterator[str]:
    """Split a migration script into statements."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                yield buffer
            buffer = ""
