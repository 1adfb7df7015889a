"""Concurrency limits and rate windows in the PostgreSQL store's claim.

Claims run at once on many connections, so the pick query's exclusion of saturated keys is
only a filter (its snapshot may be behind). A claim that picked limited runs then takes a
transaction-level advisory lock on each of their limit and rate keys, in ascending order of the
lock's id (never a cycle), and only then reads the keys' active runs and windows: a statement
of its own, whose snapshot sees every claim committed before the locks were granted, while the
later ones wait for them. :func:`~cronbus.distribution.limits.admit` keeps what fits, and the
windows used are written before the locks are released (at the commit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ...distribution.limits import Limited, Window, admit
from ...states import ACTIVE, sql_in
from .connection import Tx
from .rows import Pick, arrays

# Two-key advisory locks: the schema's space, then the key's hash (ascending: no cycle, even
# when two keys share a hash).
LIMIT_LOCKS = """
SELECT pg_advisory_xact_lock(%(space)s, h)
FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest(%(keys)b::text[]) AS k) AS keys
ORDER BY h
"""
ACTIVE_LIMITS = f"""
SELECT limit_key, count(*) FROM runs
WHERE limit_key = ANY(%(keys)b::text[]) AND state IN {sql_in(ACTIVE)}
GROUP BY limit_key
"""
RATE_WINDOWS = """
SELECT key, window_start, used, max_starts, period FROM rate_windows
WHERE key = ANY(%(keys)b::text[])
"""
PUT_WINDOWS = """
INSERT INTO rate_windows (key, period, max_starts, window_start, used)
SELECT * FROM unnest(%(key)b::text[], %(period)b::float8[], %(max_starts)b::int[],
    %(window_start)b::float8[], %(used)b::int[])
ON CONFLICT (key) DO UPDATE SET period = excluded.period, max_starts = excluded.max_starts,
    window_start = excluded.window_start, used = excluded.used
"""
_WINDOW_COLUMNS = ("key", "period", "max_starts", "window_start", "used")


def lock_space(schema: str) -> int:
    """The first key of the advisory locks on limit and rate keys of ``schema``: claims of
    two stores (schemas) in one database never wait on each other's keys."""
    digest = hashlib.blake2b(f"cronbus-limits:{schema}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def _limited(pick: Pick) -> Limited:
    return Limited(
        limit_key=pick.limit_key,
        limit_max=pick.limit_max,
        rate_key=pick.rate_key,
        rate_max=pick.rate_max,
        rate_period=pick.rate_period,
    )


async def admit_limited(tx: Tx, picks: list[Pick], space: int, now: float) -> list[Pick]:
    """The picks that fit their limits and rates, in order; the rate windows they use are
    written. Picks without limits cost nothing (no statement, no lock)."""
    if not any(pick.limited for pick in picks):
        return picks
    limit_keys = sorted({p.limit_key for p in picks if p.limit_key is not None})
    rate_keys = sorted({p.rate_key for p in picks if p.rate_key is not None})
    await tx.queue(LIMIT_LOCKS, {"space": space, "keys": sorted({*limit_keys, *rate_keys})})
    counting = await tx.queue(ACTIVE_LIMITS, {"keys": limit_keys}) if limit_keys else None
    reading = await tx.queue(RATE_WINDOWS, {"keys": rate_keys}) if rate_keys else None
    running = {key: int(n) for key, n in await counting.fetchall()} if counting else {}
    stored = {
        key: Window(window_start=start, used=used, max_starts=most, period=period)
        for key, start, used, most, period in (await reading.fetchall() if reading else [])
    }
    # A claim whose time is behind a key's stored window (a claim with a later time counted
    # there while this one waited for the lock) starts none of that key's runs: its start
    # belongs to neither window, and writing its older window back would reset the newer one.
    late = {key for key, window in stored.items() if window.window_start > now}
    picks = [pick for pick in picks if pick.rate_key not in late]
    kept, windows = admit([_limited(pick) for pick in picks], running, stored, now)
    if windows:
        await tx.queue(PUT_WINDOWS, arrays(_WINDOW_COLUMNS, _window_rows(windows)))
    return [picks[i] for i in kept]


def _window_rows(windows: dict[str, Window]) -> Sequence[tuple[object, ...]]:
    return [
        (key, w.period, w.max_starts, w.window_start, w.used) for key, w in sorted(windows.items())
    ]
