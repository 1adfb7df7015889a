"""Namespaces (tenants, application groups): list the ones a caller may use; admins create
and delete them. ``default`` always exists and cannot be deleted; a namespace that still holds
a job, run, topic, subscription or live token cannot be deleted either (a conflict)."""

from __future__ import annotations

import builtins

from ..admin_records import Namespace
from ..errors import NotFoundError
from ..validation import check_namespace
from .context import Context, naming


class NamespacesService:
    """The store's namespaces."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def list(self) -> builtins.list[Namespace]:
        """The namespaces the caller may use, by name (every one for a token of ``*``)."""
        found = await self._c.store.list_namespaces()
        return [ns for ns in found if self._c.access.sees(ns.name)]

    async def get(self, name: str) -> Namespace:
        """One namespace the caller may use (:class:`~cronbus.errors.NotFoundError` for one
        it may not: whether it exists stays unsaid)."""
        with naming("name"):
            name = check_namespace(name, "name")
        if not self._c.access.sees(name):
            raise NotFoundError(f"no namespace named {name!r}")
        return await self._c.store.get_namespace(name)

    async def create(self, name: str) -> Namespace:
        """Create a namespace (:class:`~cronbus.errors.ConflictError` if it exists)."""
        self._c.admin()
        with naming("name"):
            name = check_namespace(name, "name")
        created = await self._c.store.put_namespace(name, self._c.now())
        await self._c.audit("namespaces.create", name, namespace=None)
        return created

    async def delete(self, name: str) -> None:
        """Delete an empty namespace; ``default``, or one still holding a job, run, topic,
        subscription or live token, is a :class:`~cronbus.errors.ConflictError`."""
        self._c.admin()
        with naming("name"):
            name = check_namespace(name, "name")
        await self._c.store.delete_namespace(name, self._c.now())
        await self._c.audit("namespaces.delete", name, namespace=None)
