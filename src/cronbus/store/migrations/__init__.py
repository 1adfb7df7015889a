"""Versioned SQL migrations, one folder per dialect: ``NNNN_name.sql`` applied in order.

A store applies pending migrations when it opens (under a lock, so concurrent openers apply
them once), unless its URL says ``migrate=false``: then ``cronbus migrate`` applies them, and a
store whose schema is behind refuses to open with a :class:`~cronbus.errors.SchemaError`. A schema
newer than this cronbus is always refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Protocol, runtime_checkable

from ...errors import SchemaError, StoreURLError


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered SQL script."""

    version: int
    name: str
    sql: str


def load(dialect: str) -> list[Migration]:
    """The migrations of ``dialect``, oldest first."""
    folder = resources.files(__package__).joinpath(dialect)
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest.removesuffix(".sql"), entry.read_text()))
    return sorted(found, key=lambda m: m.version)


Step = Callable[[int, int], object]
"""Told ``(applied, pending)`` before the first pending migration and after each one (a
progress bar's feed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaVersions:
    """Where a store's schema stands: the newest migration applied, and the newest known here."""

    store: str
    """The store, for messages (never a password)."""
    current: int
    latest: int

    @property
    def pending(self) -> int:
        """How many migrations wait to be applied (versions run 1, 2, … without gaps)."""
        return max(0, self.latest - self.current)


@dataclass(frozen=True, slots=True, kw_only=True)
class Migrated:
    """What ``migrate()`` did: the schema version before and after, and what it applied."""

    store: str
    before: int
    after: int
    applied: tuple[str, ...]
    """The applied migrations, as ``NNNN_name``."""


def pending(store: str, known: list[Migration], current: int) -> list[Migration]:
    """The migrations to apply to a schema at version ``current``; a newer one is refused."""
    if known and current > known[-1].version:
        raise newer_error(store, current, known[-1].version)
    return [migration for migration in known if migration.version > current]


def check(versions: SchemaVersions) -> None:
    """Refuse a schema that is behind or ahead, for stores opened with ``migrate=false``."""
    if versions.current > versions.latest:
        raise newer_error(versions.store, versions.current, versions.latest)
    if versions.pending:
        raise SchemaError(
            f"{versions.store}: the store's schema is version {versions.current}, this cronbus "
            f"needs version {versions.latest}, and the store URL says migrate=false; run "
            "`cronbus migrate` with the same store URL to apply the pending migrations"
        )


def newer_error(store: str, current: int, latest: int) -> SchemaError:
    """The error for a schema that a newer cronbus migrated."""
    return SchemaError(
        f"{store}: the store's schema is version {current}, newer than this cronbus knows "
        f"({latest}); upgrade cronbus"
    )


def auto_migrate(url: str, options: dict[str, str]) -> bool:
    """Pop the store URL option ``migrate`` (default true): may ``open()`` apply migrations?"""
    value = options.pop("migrate", "true").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise StoreURLError(f"store URL {url!r}: migrate={value!r} must be true or false")


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


@runtime_checkable
class Migrator(Protocol):
    """A store whose schema ``cronbus migrate`` can read and bring up to date, closed or open."""

    async def schema_versions(self) -> SchemaVersions:
        """The schema's version and the newest this cronbus knows, changing nothing."""
        ...

    async def migrate(self, progress: Step | None = None) -> Migrated:
        """Apply pending migrations (under the store's lock), whatever its URL's ``migrate``;
        ``progress`` is told how far it got."""
        ...
