"""New runs in the PostgreSQL store, routed and expanded in the transaction that inserts them.

A batch of plain runs (no route, limit or fan-out) is one statement, queued on the caller's
transaction and read whenever the caller likes, as before distribution existed. Otherwise, in
the same transaction: the live workers are read when a run needs them (a targeted strategy
without a target, a broadcast), targets are assigned (:mod:`.routing`), the runs are inserted,
and the fan-out parents among them get their ``fanouts`` row and children (:mod:`.fanout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ...distribution.fanout import with_broadcast_labels
from ...distribution.routing import TARGETED, LiveWorker
from ...model import FanOutKind, NewRun
from ..rows import plain
from . import fanout, routing
from . import insert_sql as iq
from .connection import Row, Tx
from .rows import run_params


class Inserting(Protocol):
    """The rows of an insert: ``(created, id)`` per run, in input order."""

    async def fetchall(self) -> list[Row]:
        """Every row (once)."""
        ...


class Fetched:
    """Rows already read inside the transaction, handed on as :class:`Inserting`."""

    def __init__(self, rows: list[Row]) -> None:
        self._rows = rows

    async def fetchall(self) -> list[Row]:
        """The rows read."""
        return self._rows


async def insert_runs(
    tx: Tx, runs: Sequence[NewRun], now: float, live: Sequence[LiveWorker] | None = None
) -> Inserting:
    """Queue the insert of new runs with their payloads (a known key returns its run);
    route and expand those that ask for it. ``live``: the live workers, when the caller has
    read them in this transaction already."""
    if all(plain(run) for run in runs):
        return await tx.queue(_statement(runs, full=False), run_params(runs, now))
    runs = [with_broadcast_labels(run) for run in runs]
    if live is None and _needs_live(runs):
        live = await routing.live_workers(tx, {run.namespace for run in runs}, now)
    runs = await routing.assign(tx, runs, live or ())
    cursor = await tx.queue(_statement(runs, full=True), run_params(runs, now, full=True))
    if all(run.fanout is None for run in runs):
        return cursor
    rows = await cursor.fetchall()
    await fanout.expand_parents(tx, runs, rows, live, now)
    return Fetched(rows)


def _statement(runs: Sequence[NewRun], *, full: bool) -> str:
    """The insert for ``runs``: with DO NOTHING when one has a unique key (idempotency, job
    fire, child's place)."""
    keyed = any(
        run.idempotency_key is not None or run.job_id is not None or run.child_index is not None
        for run in runs
    )
    if full:
        return iq.INSERT_ROUTED_KEYED_RUNS if keyed else iq.INSERT_ROUTED_RUNS
    return iq.INSERT_KEYED_RUNS if keyed else iq.INSERT_RUNS


def _needs_live(runs: Sequence[NewRun]) -> bool:
    """Whether inserting ``runs`` reads the live workers: a run of a targeted strategy without
    a target, or a broadcast to expand (shards are expanded without workers; their children
    read them if they need targets)."""
    for run in runs:
        if run.fanout is not None:
            if run.fanout.kind is FanOutKind.BROADCAST:
                return True
        elif run.target_worker is None and run.route in TARGETED:
            return True
    return False
