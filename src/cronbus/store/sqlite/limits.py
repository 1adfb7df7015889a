"""Limits in the SQLite store's claim: which picked runs fit their concurrency limits and rate
windows (:func:`cronbus.distribution.limits.admit` decides), and the windows written back.

A claim is one write transaction, so the counts read here are exact: no other claim can start
a run between this read and the claim's commit.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence

from ...distribution.limits import Limited, Window, admit
from . import dist_sql as dq
from .rows import Row

# Columns of sql.READY_COLUMNS.
_LIMIT_KEY, _LIMIT_MAX, _RATE_KEY, _RATE_MAX, _RATE_PERIOD = 13, 14, 15, 16, 17


def limited(row: Row) -> bool:
    """Whether a picked run (a row of ``SELECT_READY``) has a concurrency limit or a rate."""
    return row[_LIMIT_KEY] is not None or row[_RATE_KEY] is not None


def admitted(conn: sqlite3.Connection, rows: Sequence[Row], now: float) -> list[Row]:
    """The picked rows that fit their limits, in pick order; the rate windows they use are
    written back. Rows without limits all pass, and cost no statement when none has one."""
    if not any(limited(row) for row in rows):
        return list(rows)
    picked = [
        Limited(
            limit_key=row[_LIMIT_KEY],
            limit_max=row[_LIMIT_MAX],
            rate_key=row[_RATE_KEY],
            rate_max=row[_RATE_MAX],
            rate_period=row[_RATE_PERIOD],
        )
        for row in rows
    ]
    limit_keys = sorted({run.limit_key for run in picked if run.limit_key is not None})
    rate_keys = sorted({run.rate_key for run in picked if run.rate_key is not None})
    running: dict[str, int] = {}
    if limit_keys:
        running = dict(conn.execute(dq.ACTIVE_LIMITS, (json.dumps(limit_keys),)).fetchall())
    windows: dict[str, Window] = {}
    if rate_keys:
        for key, start, used, most, period in conn.execute(dq.WINDOWS, (json.dumps(rate_keys),)):
            windows[key] = Window(window_start=start, used=used, max_starts=most, period=period)
    kept, used_windows = admit(picked, running, windows, now)
    conn.executemany(
        dq.PUT_WINDOW,
        [
            (key, window.period, window.max_starts, window.window_start, window.used)
            for key, window in sorted(used_windows.items())
        ],
    )
    return [rows[index] for index in kept]


def full_window_end(conn: sqlite3.Connection, namespace: str) -> float | None:
    """When the earliest full rate window of ``namespace`` ends, so an idle worker looks again
    as it opens. Windows count in wall-clock time (``next_eta`` has no caller's time): one that
    ended already is no reason to wake."""
    params = {"low": f"{namespace}:", "high": f"{namespace};", "now": time.time()}
    row = conn.execute(dq.FULL_WINDOW_ENDS, params).fetchone()
    return None if row is None or row[0] is None else float(row[0])
