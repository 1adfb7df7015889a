"""Rows of the SQLite store: running statements for them, inserting new runs, and the
parameters of ended attempts and pushes.

Inside write transactions the caller holds; shared by defers, fires and job follow-ups.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...errors import StoreError
from ...events.records import DeliveryOutcome, DeliveryResult
from ...events.states import DeliveryEvent, DeliveryState, transition
from ...model import Deferred, NewRun, Outcome
from ..logic import Finish
from ..rows import distribution_values, new_run_values, plain
from . import sql as q

Row = tuple[Any, ...]


def fetch_all(conn: sqlite3.Connection, sql: str, params: Any = ()) -> list[Row]:
    """The rows of one statement."""
    return conn.execute(sql, params).fetchall()


def fetch_one(conn: sqlite3.Connection, sql: str, params: Any = ()) -> Row | None:
    """The first row of one statement, if any."""
    row: Row | None = conn.execute(sql, params).fetchone()
    return row


def execute(conn: sqlite3.Connection, sql: str, params: Any = ()) -> int:
    """Run one statement; how many rows it changed."""
    return conn.execute(sql, params).rowcount


def execute_many(conn: sqlite3.Connection, sql: str, rows: Any) -> None:
    """Run one statement for each of ``rows``."""
    conn.executemany(sql, rows)


def insert_rows(conn: sqlite3.Connection, runs: Sequence[NewRun], now: float) -> list[Deferred]:
    """Insert runs and their payloads as they are (targets chosen, fan-outs not expanded: see
    :func:`.fanout.insert_runs`); a known idempotency key (of the run's namespace: keys are
    unique per namespace) or (job, fire) returns its run.

    Runs without a key go in with one ``executemany`` per statement (runs that use routing,
    limits or fan-out bind more columns), their ids read from ``sqlite_sequence`` (the write
    lock makes them consecutive); keyed ones one at a time, to learn which were new.
    """
    out: list[Deferred | None] = [None] * len(runs)
    payloads: list[tuple[int, str, str, str, float, str | None]] = []
    unkeyed = [i for i, r in enumerate(runs) if r.idempotency_key is None and r.job_id is None]
    if unkeyed:
        simple = [i for i in unkeyed if plain(runs[i])]
        full = [i for i in unkeyed if not plain(runs[i])]
        first = sequence(conn, "runs") + 1
        if simple:
            conn.executemany(q.INSERT_RUN, [run_row(runs[i], now) for i in simple])
        if full:
            conn.executemany(q.INSERT_FULL_RUN, [full_row(runs[i], now) for i in full])
        if sequence(conn, "runs") != first + len(unkeyed) - 1:
            raise StoreError("run ids were not consecutive inside one transaction")
        for offset, i in enumerate([*simple, *full]):
            out[i] = Deferred(id=first + offset, created=True)
            run = runs[i]
            payloads.append(
                (first + offset, run.args_json, run.kwargs_json, run.namespace, now, run.trace)
            )
    for i, run in enumerate(runs):
        if out[i] is not None:
            continue
        row = conn.execute(q.INSERT_KEYED_RUN, full_row(run, now)).fetchone()
        if row is not None:
            out[i] = Deferred(id=row[0], created=True)
            payloads.append((row[0], run.args_json, run.kwargs_json, run.namespace, now, run.trace))
            continue
        if run.idempotency_key is not None:
            existing = conn.execute(q.RUN_BY_KEY, (run.namespace, run.idempotency_key)).fetchone()
        else:
            existing = conn.execute(q.RUN_BY_FIRE, (run.job_id, run.fire_at)).fetchone()
        out[i] = Deferred(id=existing[0], created=False)
    conn.executemany(q.INSERT_PAYLOAD, payloads)
    return [d for d in out if d is not None]


def sequence(conn: sqlite3.Connection, table: str) -> int:
    """The last id AUTOINCREMENT gave in ``table``."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
    return int(row[0]) if row else 0


def run_row(run: NewRun, now: float) -> tuple[Any, ...]:
    """A plain new run's row, for ``INSERT_RUN``."""
    return (*new_run_values(run, now), now, now)


def full_row(run: NewRun, now: float) -> tuple[Any, ...]:
    """A new run's row with its distribution columns, for ``INSERT_FULL_RUN``: the lists
    (``route_labels``, ``route_order``, second and third) as JSON text."""
    route, labels, order, *rest = distribution_values(run)
    return (*new_run_values(run, now), now, now, route, _json(labels), _json(order), *rest)


def _json(value: tuple[str, ...] | None) -> str | None:
    """A list column's value as SQLite stores it: JSON text, or NULL."""
    return None if value is None else json.dumps(list(value))


def finish_params(run_id: int, attempt_id: int, change: Finish, now: float) -> dict[str, Any]:
    """``FINISH_RUN``'s parameters: a run's change when one of its attempts ended."""
    return {
        "run_id": run_id,
        "attempt_id": attempt_id,
        "state": change.state.value,
        "eta": change.eta,
        "lane": int(change.lane),
        "used": change.used,
        "lost": change.lost,
        "now": now,
        "finished_at": change.finished_at,
    }


def attempt_params(outcome: Outcome, now: float) -> dict[str, Any]:
    """``FINISH_ATTEMPT``'s parameters: how an attempt ended."""
    error = outcome.error
    return {
        "attempt_id": outcome.attempt_id,
        "now": now,
        "outcome": outcome.outcome.value,
        "result": outcome.result_json,
        "error_type": error.type if error else None,
        "error_message": error.message if error else None,
        "traceback": error.traceback if error else None,
        "logs": outcome.logs or None,
    }


def delivery_finish_params(result: DeliveryResult, now: float) -> dict[str, Any]:
    """``FINISH``'s parameters: where a pushed delivery goes from its result."""
    if result.outcome is DeliveryOutcome.ACKED:
        event = DeliveryEvent.ACK
    elif result.retry_at is not None:
        event = DeliveryEvent.FAIL
    else:
        event = DeliveryEvent.GIVE_UP
    state = transition(DeliveryState.IN_FLIGHT, event)
    return {
        "id": result.delivery_id,
        "state": state.value,
        "spent": int(result.spend_attempt),
        "due_at": result.retry_at if state is DeliveryState.RETRY else None,
        "now": now,
        "status": result.status,
        "error": result.error,
        "response": result.response,
    }


def delivery_attempt_params(result: DeliveryResult) -> dict[str, Any]:
    """A delivery attempt's row, for ``INSERT_ATTEMPT``."""
    return {
        "id": result.delivery_id,
        "outcome": result.outcome.value,
        "started_at": result.started_at,
        "finished_at": result.finished_at,
        "status": result.status,
        "error": result.error,
        "response": result.response,
    }
