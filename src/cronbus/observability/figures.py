"""The store-wide figures behind the gauges: computed once, read by everyone.

:func:`shared_figures` returns an app namespace's :class:`Figures` computed at most :data:`TTL`
seconds ago. Within a process they are cached in the process-wide cache the console uses
(:data:`cronbus.services.stats.CACHE`), and they are built on the console's own cached
:class:`~cronbus.services.overview.Overview` (queue depths, workers), so a process serving
both the console and /metrics counts once. The only reads added to the overview's are the
subscriptions with their cursors and the topics with their last offsets: no count over a table.

Across processes, the store's role leases and snapshots (:mod:`cronbus.store.lease_ports`) share
them: a process that finds the stored figures older than :data:`TTL` takes the ``metrics:NS``
lease, computes them and stores them; the others read that one row. When another process holds
the lease, its last figures are read while the lease lasts (:data:`LEASE_SECONDS`), so figures
are at most that old; a holder that stopped computing loses the lease and the next scraper takes
it. So a cluster of any size counts at most once per :data:`TTL` while it is scraped, and not at
all when nobody scrapes.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events.records import TopicInfo
from ..services.stats import CACHE
from ..states import RunState

if TYPE_CHECKING:
    from ..app import App
    from ..store import Store

__all__ = ["LEASE_SECONDS", "TTL", "Figures", "compute_figures", "shared_figures"]

TTL = 2.0
"""Seconds figures are served before they are computed (or read) again."""
LEASE_SECONDS = 3 * TTL
"""How long a process that computed the figures keeps the right to compute them for all."""
_HOLDER = f"metrics-{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """One namespace's store-wide figures at ``taken_at`` (epoch seconds)."""

    namespace: str
    taken_at: float
    depths: tuple[tuple[str, str, int], ...] = ()
    """``(queue, live state, runs)``, by queue then state; only states holding runs."""
    oldest: dict[str, float] = field(default_factory=dict)
    """The earliest due time (eta) of each queue's queued runs."""
    workers: dict[str, int] = field(default_factory=dict)
    """Workers by state: alive, draining, lost."""
    lags: dict[str, int] = field(default_factory=dict)
    """Events of each subscription's topic past its cursor."""

    def to_json(self) -> str:
        """The figures as a JSON document (what the store's snapshots keep)."""
        # Not dataclasses.asdict: it deep-copies each of a thousand queues' tuples (100 ms).
        body = {
            "namespace": self.namespace,
            "taken_at": self.taken_at,
            "depths": self.depths,
            "oldest": self.oldest,
            "workers": self.workers,
            "lags": self.lags,
        }
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> Figures:
        """Figures from :meth:`to_json`'s document."""
        raw: dict[str, Any] = json.loads(body)
        return cls(
            namespace=str(raw["namespace"]),
            taken_at=float(raw["taken_at"]),
            depths=tuple((str(q), str(s), int(n)) for q, s, n in raw.get("depths", ())),
            oldest={str(k): float(v) for k, v in raw.get("oldest", {}).items()},
            workers={str(k): int(v) for k, v in raw.get("workers", {}).items()},
            lags={str(k): int(v) for k, v in raw.get("lags", {}).items()},
        )


async def shared_figures(app: App) -> Figures:
    """The figures of ``app``'s namespace, computed at most :data:`TTL` seconds ago (one
    computation for every caller of the process)."""
    store = app.store
    key = ("metrics", store.url, id(store), app.namespace)

    async def take() -> Figures:
        return await _shared(app)

    return await CACHE.get(key, take, ttl=TTL)


async def _shared(app: App) -> Figures:
    """The figures stored by the lease holder if fresh; else computed here, and stored for the
    others when this process gets the lease."""
    store, now = app.store, app.clock.now()
    key = f"metrics:{app.namespace}"
    row = await store.get_snapshot(key)
    if row is not None and now - row[0] < TTL:
        return Figures.from_json(row[1])
    if await store.hold_lease(key, _HOLDER, now, LEASE_SECONDS):
        figures = await compute_figures(app)
        await store.put_snapshot(key, figures.to_json(), figures.taken_at)
        return figures
    if row is not None and now - row[0] < LEASE_SECONDS:
        return Figures.from_json(row[1])  # the holder is computing them now and then
    return await compute_figures(app)


async def compute_figures(app: App) -> Figures:
    """Compute the figures from the console's cached overview and the subscriptions."""
    overview = await app.services().overview.snapshot()
    depths = tuple((d.queue, d.state.value, d.count) for d in overview.queues)
    oldest = {
        d.queue: d.oldest
        for d in overview.queues
        if d.state is RunState.QUEUED and d.oldest is not None
    }
    return Figures(
        namespace=app.namespace,
        taken_at=overview.taken_at,
        depths=depths,
        oldest=oldest,
        workers={state.value: count for state, count in overview.workers.items()},
        lags=await subscription_lags(app.store, app.namespace),
    )


async def subscription_lags(store: Store, namespace: str) -> dict[str, int]:
    """Events past each subscription's cursor: its topic's last offset minus the cursor."""
    subs = await store.list_subscriptions(namespace=namespace)
    if not subs:
        return {}
    topics: dict[str, TopicInfo] = {t.name: t for t in await store.list_topics(namespace)}
    lags = {}
    for sub in subs:
        topic = topics.get(sub.topic)
        last = topic.last_offset if topic is not None else 0
        lags[sub.name] = max(0, last - sub.cursor)
    return lags
