"""The audit log: every change made through the services, who made it and when.

Admins of every namespace read the whole log (entries of no namespace, like tokens, included);
other callers read the entries of their namespaces. Entries are written by the services
themselves (:meth:`Context.audit`), one per change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..admin_records import AuditEntry
from ..validation import check_namespace
from .access import Scope
from .context import Context, naming
from .pages import DEFAULT_LIMIT, Page, check_limit, decode_cursor, page_of

_CURSOR = {"b": int}


class AuditService:
    """The audit log as one caller may read it."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def list(
        self, limit: int = DEFAULT_LIMIT, cursor: str | None = None, namespace: str | None = None
    ) -> Page[AuditEntry]:
        """Entries newest first, a page at a time: every entry for an admin of every
        namespace, else those of the caller's namespaces (``namespace`` narrows to one)."""
        access = self._c.access
        limit = check_limit(limit)
        before = None if cursor is None else decode_cursor(cursor, _CURSOR)["b"]
        if namespace is not None:
            with naming("namespace"):
                namespace = check_namespace(namespace)
            access.require(Scope.READ, namespace)
            wanted: str | list[str] | None = namespace
        elif access.every_namespace and access.scope is Scope.ADMIN:
            wanted = None
        elif access.every_namespace:
            wanted = [ns.name for ns in await self._c.store.list_namespaces()]
        else:
            wanted = sorted(access.namespaces or ())
        found = await self._c.store.list_audit(wanted, before, limit + 1)
        return page_of(found, limit, lambda entry: {"b": entry.id})

    async def record(
        self, action: str, resource: object, detail: Mapping[str, Any] | None = None
    ) -> None:
        """Record a change made in this namespace outside the services (a front end's own)."""
        self._c.write()
        await self._c.audit(action, resource, detail)
