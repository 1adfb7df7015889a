"""Fixtures shared by every tier: real stores on real files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contract.pg import pg_store_url
from cronbus.store import Store, open_store


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file for one test."""
    return f"sqlite:///{tmp_path / 'cronbus.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
async def each_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL on each backend in turn: a fresh SQLite file, then a fresh PostgreSQL schema
    on ``CRONBUS_TEST_PG`` (skipped locally when unreachable, failed when ``CI=true``)."""
    if request.param == "postgres":
        return await pg_store_url(request)
    return f"sqlite:///{tmp_path / 'cronbus.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each store backend, opened on a fresh database; the contract suite runs once per param.

    PostgreSQL gets a fresh schema on ``CRONBUS_TEST_PG``: skipped locally when unreachable,
    failed when ``CI=true``.
    """
    if request.param == "postgres":
        url = await pg_store_url(request)
    else:
        url = f"sqlite:///{tmp_path / 'contract.db'}"
    s = open_store(url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()
