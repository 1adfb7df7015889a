"""The PostgreSQL store's statements stay small enough for psycopg to cache their parsing."""

from __future__ import annotations

import importlib
import pkgutil

from psycopg import _queries

import cronbus.store.postgres as postgres


def test_every_named_statement_fits_psycopgs_parse_cache() -> None:
    # Longer statements are parsed again on every execute (a regex over the whole text): the
    # claim's PICK, at 4.3 kB, was 3% of a busy worker's time.
    limit = _queries.MAX_CACHED_STATEMENT_LENGTH
    too_long = []
    for module in pkgutil.iter_modules(postgres.__path__):
        loaded = importlib.import_module(f"{postgres.__name__}.{module.name}")
        for name, value in vars(loaded).items():
            if name.isupper() and isinstance(value, str) and len(value.encode()) > limit:
                too_long.append(f"{module.name}.{name}: {len(value.encode())} bytes")
    assert not too_long, f"statements over psycopg's {limit}-byte parse cache: {too_long}"
