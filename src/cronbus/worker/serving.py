"""What a worker serves: the queues it shares its claims among (a fixed weighted list, or every
queue), and its labels.

A worker given queues (``"default,emails:3"``) shares each claim among them by weight. A worker
serving every queue (``"*"``, the default) shares it among the queues that hold claimable runs,
each with weight 1. It reads that list from the store (one index-only query whose cost grows with
the number of queues, not of runs) when it may be out of date: after a wake-up (the new runs may
be in a queue not listed yet), after an idle wait that ran out (runs came due), and at least
every :data:`REFRESH_SECONDS` while busy. A queue first used after the worker started is
therefore served as soon as its first run is deferred.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from ..errors import ConfigurationError
from ..fairness import EVERY_QUEUE, Queues, parse_queues, serves_every_queue
from ..store.ports import Runs
from ..validation import DEFAULT_NAMESPACE, shorten

REFRESH_SECONDS = 1.0
"""While busy, a worker serving every queue reads the list of queues with claimable runs at
least this often, so a queue whose runs arrived without a wake-up waits at most this long."""
RECENT_SECONDS = 60.0
"""A worker serving every queue keeps a slot for each queue it saw work in this recently."""

_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:=-]{0,99}")


def check_labels(labels: str | Sequence[str]) -> tuple[str, ...]:
    """Worker labels from a comma list or a sequence; each is refused with a clear error
    unless it is 1-100 letters, digits, ``.``, ``_``, ``:``, ``=`` or ``-``."""
    items = labels.split(",") if isinstance(labels, str) else list(labels)
    chosen = tuple(label.strip() for label in items if label.strip())
    for label in chosen:
        if not _LABEL.fullmatch(label):
            raise ConfigurationError(
                f"invalid worker label {shorten(label)}: use 1 to 100 letters, digits, '.', '_', "
                "':', '=' or '-'"
            )
    return chosen


class Serving:
    """Which queues a worker claims from, and when to ask the next ones at once."""

    def __init__(self, spec: str | Sequence[str] = EVERY_QUEUE) -> None:
        self.spec = parse_queues(spec)
        """The parsed spec: named queues with weights, or ``(("*", 1),)`` for every queue."""
        self.every = serves_every_queue(self.spec)
        self._ready: Queues = ()
        self._read_at = -math.inf
        self._stale = True
        self._misses = 0
        self._seen: dict[str, float] = {}

    @property
    def registered(self) -> list[str]:
        """The queues as the worker registry shows them: the names, or ``["*"]``."""
        return [name for name, _ in self.spec]

    @property
    def eta_queues(self) -> list[str] | None:
        """The queues whose next scheduled run ends an idle wait (None: every queue)."""
        return None if self.every else self.registered

    def describe(self) -> str:
        """The queues for a log line: ``every queue`` or ``default,emails:3``."""
        if self.every:
            return "every queue"
        return ",".join(f"{name}:{weight}" if weight != 1 else name for name, weight in self.spec)

    def mark_stale(self) -> None:
        """New runs may be in a queue not listed yet: read the list again before the next
        claim."""
        self._stale = True

    def current(self) -> Queues:
        """The queues claims are shared among at the moment."""
        return self._ready if self.every else self.spec

    async def refresh(
        self, store: Runs, now: float, clock: float, namespace: str = DEFAULT_NAMESPACE
    ) -> Queues:
        """The queues to share the next claim among, read again from ``store`` first when
        serving every queue and the list is stale or older than :data:`REFRESH_SECONDS` by
        the monotonic ``clock``; ``now`` is the store's time (due scheduled runs count).
        Only queues holding claimable runs of ``namespace`` count."""
        if not self.every:
            return self.spec
        if self._stale or clock >= self._read_at + REFRESH_SECONDS:
            # Cleared before the read: a wake-up arriving during it makes the list stale again.
            self._stale = False
            try:
                names = await store.ready_queues(now, namespace)
            except BaseException:
                self._stale = True
                raise
            self._ready = tuple((name, 1) for name in names)
            self._read_at = clock
            self._seen.update(dict.fromkeys(names, clock))
        return self._ready

    def recent(self, clock: float) -> list[str]:
        """For a worker serving every queue, the queues seen holding claimable runs within
        :data:`RECENT_SECONDS` by the monotonic ``clock``: the slot plan keeps one for each
        (see :func:`~cronbus.fairness.plan_slots`). Empty for a worker of named queues,
        whose queues are all known."""
        if not self.every:
            return []
        since = clock - RECENT_SECONDS
        for name in [n for n, at in self._seen.items() if at < since]:
            del self._seen[name]
        return list(self._seen)

    def claim_again(self, free: int, claimed: int) -> bool:
        """Whether to claim again at once after a claim that took ``claimed`` runs for ``free``
        slots, instead of waiting idle.

        With fewer slots than queues a claim asks only some of them (the rotation moves on each
        time); when a claim left slots free, the next ones are asked at once, until every queue
        was asked since the last claim that filled every slot. Without this, runs in the last
        queue of a long list would wait an idle poll for each queue before it.
        """
        if claimed >= free:
            self._misses = 0
            return False
        self._misses += 1
        if self._misses * free < len(self.current()):
            return True
        self._misses = 0
        return False
