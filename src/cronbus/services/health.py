"""Readiness: the store answers, and its schema is the one this cronbus needs.

No access check: load balancers and orchestrators ask without a token, and the answer says
nothing about what the store holds.
"""

from __future__ import annotations

from ..errors import CronbusError, StoreError
from ..store.migrations import Migrator
from .context import Context


class HealthService:
    """Whether the store can serve requests."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def ready(self) -> int:
        """The store's schema version, or :class:`~cronbus.errors.StoreError` saying why the
        store cannot serve (unreachable, or ``cronbus migrate`` pending)."""
        store = self._c.store
        try:
            await store.check()
            version = await store.schema_version()
            if isinstance(store, Migrator):
                versions = await store.schema_versions()
                if versions.current != versions.latest:
                    raise StoreError(
                        f"the store's schema is version {versions.current}, this cronbus needs "
                        f"{versions.latest}; run `cronbus migrate`"
                    )
        except StoreError:
            raise
        except CronbusError as exc:
            raise StoreError(str(exc)) from exc
        except OSError as exc:
            raise StoreError(f"the store is not reachable: {exc}") from exc
        return version
