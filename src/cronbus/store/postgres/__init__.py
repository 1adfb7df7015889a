"""The PostgreSQL store, one module per role of :mod:`cronbus.store.ports` (the same names as in
:mod:`cronbus.store.sqlite`): :mod:`.runs`, :mod:`.leases`, :mod:`.jobs`, :mod:`.workers`,
:mod:`.wake`, :mod:`.events`, :mod:`.subscriptions`; put together in :mod:`.store`, over
:mod:`.connection`; SQL in :mod:`.sql`, :mod:`.jobs_sql`, :mod:`.events_sql`; rows in
:mod:`.rows`; the URL in :mod:`.url`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .connection import channel_name
from .store import PostgresStore
from .url import PostgresOptions, parse_url

__all__ = ["PostgresOptions", "PostgresStore", "channel_name", "parse_url"]

if TYPE_CHECKING:
    from ..ports import Store

    def _conforms(store: PostgresStore) -> Store:
        """mypy checks here that the PostgreSQL store provides every role of the contract."""
        return store
