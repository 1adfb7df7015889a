"""The SQLite store, one module per role of :mod:`cronbus.store.ports` (the same names as in
:mod:`cronbus.store.postgres`): :mod:`.runs`, :mod:`.leases`, :mod:`.jobs`, :mod:`.workers`,
:mod:`.wake`, :mod:`.events`, :mod:`.subscriptions`; put together in :mod:`.store`, over
:mod:`.connection`; SQL in :mod:`.sql`, :mod:`.jobs_sql`, :mod:`.events_sql`, :mod:`.dist_sql`;
rows in :mod:`.rows`; the URL in :mod:`.url`. Distribution (routing, limits, fan-out) is applied
inside the roles' transactions by :mod:`.routing`, :mod:`.limits`, :mod:`.fanout`,
:mod:`.requeue` and :mod:`.endings` (what follows a run's end: its parent, its job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .store import SQLiteStore
from .url import SqliteOptions, parse_url

__all__ = ["SQLiteStore", "SqliteOptions", "parse_url"]

if TYPE_CHECKING:
    from ..ports import Store

    def _conforms(store: SQLiteStore) -> Store:
        """mypy checks here that the SQLite store provides every role of the contract."""
        return store
