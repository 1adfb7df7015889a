"""The contract suite moves time by hand (``now`` = T0 + ...), so on PostgreSQL its store times
leases by the caller's ``now`` (:data:`~cronbus.store.fencing.CALLER_CLOCK`), as SQLite always
does. The server's clock, the default on PostgreSQL, is tested in ``test_fencing.py``.
"""

from __future__ import annotations

import pytest

from cronbus.store import Store
from cronbus.store.fencing import CALLER_CLOCK
from cronbus.store.postgres import PostgresStore


@pytest.fixture
def store(store: Store) -> Store:
    """The tier's store (``tests/conftest.py``), on the caller's clock for leases."""
    if isinstance(store, PostgresStore):
        store.lease_clock = CALLER_CLOCK
    return store
