"""The store's door to metrics: what a store reports as it works, without knowing Prometheus.

A store carries an ``observer`` (None by default: nothing is measured and nothing imported);
:class:`cronbus.observability.metrics.Metrics` is one.
"""

from __future__ import annotations

import sys
from typing import Protocol

__all__ = ["StoreObserver", "attach", "caller"]


class StoreObserver(Protocol):
    """What a store tells about its work."""

    def transaction(self, op: str, seconds: float) -> None:
        """A write transaction of the store method ``op`` took ``seconds`` (waiting for the
        database's lock included)."""

    def published(self, topic: str, count: int) -> None:
        """``count`` new events were appended to ``topic`` (ids already stored not counted)."""


def caller(depth: int) -> str:
    """The name of the function ``depth`` frames above the caller of this one: the store
    method that opened a transaction, a bounded label (never an id)."""
    try:
        return sys._getframe(depth + 1).f_code.co_name
    except ValueError:  # fewer frames than that: called from the top of a thread
        return "other"


def attach(store: object, observer: StoreObserver | None) -> None:
    """Make ``store`` report to ``observer`` (None: to nobody); a store without the hook (a
    test double, a third-party backend) is left alone."""
    if hasattr(store, "observer"):
        # setattr: the hook is the backends' own attribute, not part of the Store protocol.
        setattr(store, "observer", observer)  # noqa: B010
