"""What every service shares: the app and its store, the caller, the namespace, and the audit.

One :class:`Context` is built by :class:`~cronbus.services.Services` and handed to each service,
so a service is a thin class of use cases over it. :func:`naming` puts a field name on the
errors of validators that do not name one, so every refusal of bad input can point at it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..admin_records import AuditEntry
from ..config import Settings
from ..errors import ConfigurationError, InvalidArgumentError, NotFoundError
from ..validation import shorten
from .access import Access, Scope

if TYPE_CHECKING:
    from ..app import App
    from ..store import Store


class Context:
    """The app, the caller's access and the namespace a set of services acts in."""

    __slots__ = ("access", "app", "namespace")

    def __init__(self, app: App, access: Access, namespace: str) -> None:
        self.app = app
        self.access = access
        self.namespace = namespace

    @property
    def store(self) -> Store:
        """The app's open store."""
        return self.app.store

    @property
    def settings(self) -> Settings:
        """The app's settings (lease length, payload limits...)."""
        return self.app.settings

    def now(self) -> float:
        """The app clock's time, in epoch seconds."""
        return self.app.clock.now()

    def read(self) -> None:
        """Refuse unless the caller may read this namespace."""
        self.access.require(Scope.READ, self.namespace)

    def write(self) -> None:
        """Refuse unless the caller may change this namespace."""
        self.access.require(Scope.WRITE, self.namespace)

    def admin(self) -> None:
        """Refuse unless the caller is an admin of every namespace."""
        self.access.require(Scope.ADMIN, None)

    def owns(self, namespace: str, missing: NotFoundError) -> None:
        """Raise ``missing`` unless ``namespace`` (a resource's) is this context's: a resource
        of another namespace is reported as not found, so its existence does not leak."""
        if namespace != self.namespace:
            raise missing

    async def audit(
        self,
        action: str,
        resource: object,
        detail: Mapping[str, Any] | None = None,
        *,
        namespace: str | bool | None = True,
    ) -> None:
        """Record a change in the audit log: ``action`` like ``jobs.pause``, ``resource`` the
        name or id changed. ``namespace=True`` (the default) is this context's namespace;
        None is a change outside any (tokens, namespaces)."""
        entry = AuditEntry(
            at=self.now(),
            actor=self.access.token_id or self.access.actor,
            namespace=self.namespace if namespace is True else (namespace or None),
            action=action,
            resource=str(resource),
            detail=dict(detail or {}),
        )
        await self.store.record_audit([entry])


ID_LIMIT = 2**63 - 1
"""Ids are signed 64-bit integers in both stores."""


def check_id(value: object, field: str) -> int:
    """An id (of a run, a delivery, an operation...): a whole number from 1 to 2^63 - 1, the
    range of the stores' id columns (a bigger one would overflow the query's parameter)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ID_LIMIT:
        raise InvalidArgumentError(
            f"{field} must be a whole number from 1 to {ID_LIMIT}, got {shorten(value)}",
            field=field,
        )
    return value


def guess_field(message: str, words: Mapping[str, str], default: str) -> str:
    """The input an error message is about: of ``words`` (a phrase the validators write, like
    ``queue name``, mapped to the input's field name), the one the message mentions first;
    ``default`` when it mentions none. Validators start their messages with what they refuse
    (``jitter must be...``), so the first mention is the culprit."""
    best: tuple[int, int, str] | None = None
    for word, name in words.items():
        found = re.search(rf"(?<![A-Za-z_]){re.escape(word)}(?![A-Za-z_])", message)
        # The earliest mention wins; at one place, the longest phrase ("event type" > "type").
        if found and (best is None or (found.start(), -len(word)) < best[:2]):
            best = (found.start(), -len(word), name)
    return default if best is None else best[2]


@contextlib.contextmanager
def naming(field: str) -> Iterator[None]:
    """Give ``field`` to an :class:`~cronbus.errors.InvalidArgumentError` (or a
    :class:`~cronbus.errors.ConfigurationError` of a definition's option) raised inside without
    one, so the front ends can name the input at fault."""
    try:
        yield
    except InvalidArgumentError as exc:
        if exc.field is None:
            exc.field = field
        raise
    except ConfigurationError as exc:
        raise InvalidArgumentError(str(exc), field=field) from None
