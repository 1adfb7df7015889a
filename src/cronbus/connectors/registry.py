"""The connector kinds an app knows: the built-ins, and those its code registers."""

from __future__ import annotations

import re
from typing import TypeVar

from ..errors import ConnectorConfigError, InvalidArgumentError
from .allow import NOWHERE, Reach, Reaching
from .api import Connector

C = TypeVar("C", bound=type[Connector])

_KIND = re.compile(r"^[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*$")


class ConnectorKinds:
    """Kinds by name: :meth:`register` adds an app's own; the built-ins
    (:mod:`cronbus.connectors.builtin`) are always there."""

    def __init__(self) -> None:
        self._own: dict[str, type[Connector]] = {}

    def register(self, cls: C) -> C:
        """Register a connector class under its ``kind`` (usable as a class decorator)."""
        kind = getattr(cls, "kind", None)
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise InvalidArgumentError(
                f"connector class {cls.__name__}: kind must be lowercase words joined by "
                f"'-', '_' or '.', not {kind!r}"
            )
        known = self._own.get(kind)
        if known is not None and known is not cls:
            raise InvalidArgumentError(f"connector kind {kind!r} is registered already")
        self._own[kind] = cls
        return cls

    def kinds(self) -> list[str]:
        """Every kind known, sorted."""
        from .builtin import BUILTIN

        return sorted({*BUILTIN, *self._own})

    def get(self, kind: str, reach: Reach = NOWHERE) -> Connector:
        """A connector of ``kind``, a file or database one limited to ``reach``; raises
        :class:`~cronbus.errors.ConnectorConfigError` naming the known kinds for an unknown
        one."""
        from .builtin import BUILTIN

        cls = self._own.get(kind) or BUILTIN.get(kind)
        if cls is None:
            known = ", ".join(self.kinds())
            raise ConnectorConfigError(f"unknown connector kind {kind!r} (known: {known})")
        return cls(reach) if issubclass(cls, Reaching) else cls()
