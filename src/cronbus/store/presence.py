"""Whether a store is there, and still the one a process opened.

Commands that only read open a store only if it exists: a mistyped path or schema must say so,
not create an empty store and report that it holds nothing. Long-running roles check, every few
seconds, that their store is still the one they opened (an SQLite file deleted or overwritten
under them would otherwise be written to in vain, with nothing logged).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from ..errors import SchemaError, StoreError
from .migrations import SchemaVersions, newer_error

__all__ = ["StoreFaultError", "StoreNotFoundError", "check_readable", "not_found", "shown_url"]


class StoreNotFoundError(StoreError):
    """No store is at that URL; create it with `cronbus migrate` or any writing command."""


class StoreFaultError(StoreError):
    """The store a process opened is gone, replaced or unreadable; the process must stop."""


def not_found(url: str, detail: str = "") -> StoreNotFoundError:
    """The error of a read-only open that found no store at ``url``."""
    why = f"{detail}; " if detail else ""
    return StoreNotFoundError(
        f"no such store: {shown_url(url)} ({why}create it with `cronbus migrate` or any "
        "writing command)"
    )


def check_readable(versions: SchemaVersions) -> None:
    """Refuse, for a read-only open, a schema that is behind (nothing migrates it here) or
    newer than this cronbus."""
    if versions.current > versions.latest:
        raise newer_error(versions.store, versions.current, versions.latest)
    if versions.pending:
        raise SchemaError(
            f"{versions.store}: the store's schema is version {versions.current} and this "
            f"cronbus needs version {versions.latest}; run `cronbus migrate` with the same store "
            "URL (or start any role) to apply the pending migrations"
        )


def shown_url(url: str) -> str:
    """A store URL as messages may show it: without its password."""
    parts = urlsplit(url.strip())
    if parts.password is None:
        return url.strip()
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
