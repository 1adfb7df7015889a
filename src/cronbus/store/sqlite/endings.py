"""What follows runs becoming terminal in the SQLite store, in the transaction that ended them:
their parents count them (and may end in turn), and their jobs plan the next fire or fire
their child jobs. Every path that ends a run (completion, reap, cancel, skip, reroute) calls
:func:`runs_ended`."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..logic import Ended
from .fanout import account
from .jobs import jobs_runs_ended


def runs_ended(
    conn: sqlite3.Connection,
    children: Sequence[Ended],
    job_runs: Sequence[int],
    now: float,
    nudges: set[str],
) -> None:
    """``children``: runs with a parent that ended; ``job_runs``: runs of jobs that ended.
    Costs no statement when both are empty (the plain path)."""
    parents = account(conn, children, now, nudges) if children else []
    jobs_runs_ended(conn, [*job_runs, *parents], now, nudges)
