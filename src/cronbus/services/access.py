"""Who is calling, and what they may do: a scope and the namespaces it covers.

Scopes are ordered ``read < write < admin``: ``read`` changes nothing, ``write`` changes the
resources of its namespaces, ``admin`` also manages tokens and namespaces. An :class:`Access`
names its namespaces, or ``None`` for every one. Every service method asks
:meth:`Access.require` first, so a refusal happens before anything is read or changed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from ..admin_records import ALL_NAMESPACES, DEFAULT_NAMESPACE
from ..errors import ForbiddenError, InvalidArgumentError
from ..validation import check_namespace, shorten

__all__ = [
    "ALL_NAMESPACES",
    "DEFAULT_NAMESPACE",
    "LOCAL",
    "Access",
    "Scope",
    "check_namespace",
    "check_scope",
]
_NOT_A_SCOPE = "\x00"


class Scope(enum.StrEnum):
    """What a caller may do, ordered: each scope allows what the ones below it allow."""

    READ = "read"
    """Read resources; change nothing."""
    WRITE = "write"
    """Also create, change and delete resources of its namespaces."""
    ADMIN = "admin"
    """Also manage tokens and namespaces, and read the audit log of every namespace."""

    @property
    def rank(self) -> int:
        """The scope's place in the order (read 0, write 1, admin 2)."""
        return _RANKS[self]

    def covers(self, needed: Scope) -> bool:
        """True when this scope allows what ``needed`` allows."""
        return self.rank >= needed.rank


_RANKS = {Scope.READ: 0, Scope.WRITE: 1, Scope.ADMIN: 2}


def check_scope(value: object, field: str = "scope") -> Scope:
    """A scope by name (``read``, ``write`` or ``admin``)."""
    try:
        return Scope(str(value)) if isinstance(value, str) else Scope(_NOT_A_SCOPE)
    except ValueError:
        allowed = ", ".join(s.value for s in Scope)
        raise InvalidArgumentError(
            f"{field} must be one of {allowed}, got {shorten(value)}", field=field
        ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class Access:
    """A caller: who (``actor``, written to the audit log), its scope, and its namespaces
    (``None``: every namespace). ``token_id`` is the public id of the token it came from."""

    actor: str
    scope: Scope
    namespaces: frozenset[str] | None = None
    token_id: str | None = None
    payloads: bool = True
    """True when it may read run arguments and results (a token made without the payloads
    permission sees them redacted)."""

    @classmethod
    def of(
        cls,
        actor: str,
        scope: Scope | str,
        namespaces: Iterable[str] | None,
        token_id: str | None = None,
    ) -> Access:
        """An access from plain values; ``*`` among ``namespaces`` means every namespace."""
        chosen = None if namespaces is None else frozenset(namespaces)
        if chosen is not None and ALL_NAMESPACES in chosen:
            chosen = None
        return cls(actor=actor, scope=check_scope(scope), namespaces=chosen, token_id=token_id)

    @property
    def every_namespace(self) -> bool:
        """True when it covers every namespace."""
        return self.namespaces is None

    def sees(self, namespace: str) -> bool:
        """True when ``namespace`` is one of its namespaces."""
        return self.namespaces is None or namespace in self.namespaces

    def allows(self, scope: Scope, namespace: str | None = None) -> bool:
        """True when :meth:`require` would pass."""
        try:
            self.require(scope, namespace)
        except ForbiddenError:
            return False
        return True

    def require(self, scope: Scope, namespace: str | None = None) -> None:
        """Raise :class:`~cronbus.errors.ForbiddenError`, naming what is missing, unless this
        access has ``scope`` (or more) in ``namespace``; ``namespace=None`` asks for every
        namespace (changes that are not one namespace's, like tokens)."""
        if not self.scope.covers(scope):
            raise ForbiddenError(
                f"{self._who()} has scope {self.scope.value}; this needs scope {scope.value}"
            )
        if namespace is None:
            if self.namespaces is not None:
                raise ForbiddenError(
                    f"{self._who()} is limited to namespace(s) {self._listed()}; this needs "
                    "access to every namespace"
                )
            return
        if not self.sees(namespace):
            raise ForbiddenError(
                f"{self._who()} may not use namespace {namespace!r} (it may use {self._listed()})"
            )

    def _who(self) -> str:
        return f"token {self.token_id}" if self.token_id else f"{self.actor!r}"

    def _listed(self) -> str:
        return ", ".join(repr(n) for n in sorted(self.namespaces or ())) or "none"


LOCAL = Access(actor="local", scope=Scope.ADMIN, namespaces=None)
"""The access of local code and local commands: the store's owner, admin over everything."""
