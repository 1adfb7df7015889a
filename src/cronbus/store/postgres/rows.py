"""Pure builders of the PostgreSQL store's parameters and readers of its rows.

Batches travel as one array per column (``unnest`` on the server), so a statement costs the
same round trip for one row or a thousand; nothing here touches the database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from ...liveness import reported_state
from ...model import ClaimedRun, NewRun, Outcome, WorkerInfo, WorkerState
from ...states import ACTIVE, AttemptOutcome, RunState
from ..logic import Finish, finish
from ..rows import DISTRIBUTION_COLUMNS, distribution_values, new_run_values
from .connection import Row


# -- claims and completions ------------------------------------------------------------------------
class Pick(NamedTuple):
    """A candidate run of ``PICK``, locked by the claiming transaction."""

    id: int
    attempts: int
    used: int
    task: str
    queue: str
    max_attempts: int
    timeout: float | None
    eta: float
    concurrency_key: str | None
    overlap: str | None
    job_id: int | None
    args: str | None
    kwargs: str | None
    limit_key: str | None
    limit_max: int | None
    rate_key: str | None
    rate_max: int | None
    rate_period: float | None
    parent_id: int | None
    child_index: int | None
    shard_total: int | None
    trace: str | None = None

    @property
    def limited(self) -> bool:
        """Whether a limit or a rate applies to the run."""
        return self.limit_key is not None or self.rate_key is not None


def claimed_runs(picks: Sequence[Pick], started: Sequence[Row]) -> list[ClaimedRun]:
    """The picks that ``START`` gave an attempt (its rows: run id, attempt id, number, fence),
    as claims."""
    attempts: dict[int, Row] = {row[0]: row for row in started}
    return [
        ClaimedRun(
            run_id=pick.id,
            attempt_id=attempts[pick.id][1],
            attempt=pick.used + 1,
            number=attempts[pick.id][2],
            fence=attempts[pick.id][3],
            task=pick.task,
            queue=pick.queue,
            args_json=pick.args if pick.args is not None else "[]",
            kwargs_json=pick.kwargs if pick.kwargs is not None else "{}",
            max_attempts=pick.max_attempts,
            timeout=pick.timeout,
            eta=pick.eta,
            parent_id=pick.parent_id,
            child_index=pick.child_index,
            shard_total=pick.shard_total,
            trace=pick.trace,
        )
        for pick in picks
        if pick.id in attempts
    ]


def first_per_run(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """Only the first outcome of a run in a batch may complete it (as in the SQLite store).

    By run id: completions lock their runs in that order, as a cancel of a parent locks its
    children, so neither waits on the other in a cycle."""
    seen: set[int] = set()
    first = []
    for outcome in outcomes:
        if outcome.run_id not in seen:
            seen.add(outcome.run_id)
            first.append(outcome)
    return sorted(first, key=lambda outcome: outcome.run_id)


def fenced(outcomes: Sequence[Outcome], ended: Sequence[Row]) -> list[bool]:
    """Which outcomes were recorded: those whose attempt the run still held."""
    held = {(row[0], row[1]) for row in ended}
    seen: set[int] = set()
    done = []
    for outcome in outcomes:
        done.append(outcome.run_id not in seen and (outcome.run_id, outcome.attempt_id) in held)
        seen.add(outcome.run_id)
    return done


def _changes(outcomes: Sequence[Outcome], now: float) -> list[Row]:
    """``COMPLETE``'s rows: each outcome's change of its run from each active state.

    :func:`~cronbus.store.logic.finish` keeps a run's eta, caps it (a lost attempt is due now
    at the latest) or replaces it (a retry): a clamp of the current eta, whose bounds are what
    it gives for -inf and +inf. So the database applies it without the run being read first.
    Outcomes alike (a batch of successes) share one computation.
    """
    known: dict[tuple[AttemptOutcome, bool, float | None], list[Row]] = {}
    rows: list[Row] = []
    for outcome in outcomes:
        key = (outcome.outcome, outcome.counts, outcome.retry_at)
        if key not in known:
            known[key] = [_change(source, outcome, now) for source in sorted(ACTIVE)]
        rows.extend(
            (outcome.run_id, outcome.attempt_id, *change, outcome.fence) for change in known[key]
        )
    return rows


def _change(source: RunState, outcome: Outcome, now: float) -> Row:
    low = finish(source, outcome, -math.inf, now)
    high = finish(source, outcome, math.inf, now)
    return (
        source.value,
        low.state.value,
        low.eta,
        high.eta,
        int(low.lane),
        low.used,
        low.lost,
        low.finished_at,
    )


def attempt_row(outcome: Outcome) -> Row:
    """An ended attempt, in the order of ``_ATTEMPT_COLUMNS``."""
    error = outcome.error
    return (
        outcome.attempt_id,
        outcome.outcome.value,
        outcome.result_json,
        error.type if error else None,
        error.message if error else None,
        error.traceback if error else None,
        outcome.logs or None,
    )


_CHANGE_COLUMNS = (
    "run_id",
    "attempt_id",
    "source",
    "state",
    "eta_low",
    "eta_high",
    "lane",
    "used",
    "lost",
    "finished_at",
    "fence",
)
_ATTEMPT_COLUMNS = (
    "a_id",
    "a_outcome",
    "a_result",
    "a_error_type",
    "a_error_message",
    "a_traceback",
    "a_logs",
)
_RUN_COLUMNS = (
    "task",
    "queue",
    "state",
    "priority",
    "eta",
    "max_attempts",
    "timeout",
    "idempotency_key",
    "target_worker",
    "route_key",
    "job_id",
    "fire_at",
    "concurrency_key",
    "overlap",
    "namespace",
    "args",
    "kwargs",
    "trace",
)


def arrays(names: Sequence[str], rows: Sequence[Row]) -> dict[str, list[Any]]:
    """Rows as one array per column, for ``unnest``."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    return {name: list(column) for name, column in zip(names, columns, strict=True)}


def complete_params(outcomes: Sequence[Outcome], now: float) -> dict[str, Any]:
    """``COMPLETE``'s parameters for ``outcomes``."""
    attempts = [attempt_row(outcome) for outcome in outcomes]
    return finish_params(_changes(outcomes, now), attempts, now)


def finish_params(changes: Sequence[Row], attempts: Sequence[Row], now: float) -> dict[str, Any]:
    """``COMPLETE``'s parameters: run changes and attempt rows as arrays."""
    return {
        **arrays(_CHANGE_COLUMNS, changes),
        **arrays(_ATTEMPT_COLUMNS, attempts),
        "now": now,
    }


def lost_change(run_id: int, attempt_id: int, source: str, change: Finish) -> Row:
    """``COMPLETE``'s row for an attempt whose lease expired (its eta is already decided; the
    reaper holds the row locked, so the attempt id fences it)."""
    return (
        run_id,
        attempt_id,
        source,
        change.state.value,
        change.eta,
        change.eta,
        int(change.lane),
        change.used,
        change.lost,
        change.finished_at,
        None,
    )


def run_params(runs: Sequence[NewRun], now: float, *, full: bool = False) -> dict[str, Any]:
    """The parameters of the statements of :mod:`.insert_sql` for new runs; ``full``: with
    the columns of routes, limits and fan-out (label lists as JSON text)."""
    if not full:
        rows = [
            (*new_run_values(run, now), run.args_json, run.kwargs_json, run.trace) for run in runs
        ]
        return {**arrays(_RUN_COLUMNS, rows), "now": now}
    rows = [
        (
            *new_run_values(run, now),
            run.args_json,
            run.kwargs_json,
            run.trace,
            *_json_lists(distribution_values(run)),
        )
        for run in runs
    ]
    return {**arrays((*_RUN_COLUMNS, *DISTRIBUTION_COLUMNS), rows), "now": now}


def _json_lists(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Distribution values with their lists (tuples) as JSON text."""
    return tuple(json.dumps(list(v)) if isinstance(v, tuple) else v for v in values)


# -- workers ---------------------------------------------------------------------------------------
def worker_from_row(row: Row, now: float | None) -> WorkerInfo:
    """A row of ``LIST_WORKERS``, its state as reported at ``now`` (lost when silent for longer
    than its own lease, :mod:`cronbus.liveness`; None: its state as stored)."""
    state = WorkerState(row[9])
    if now is not None:
        state = reported_state(state, row[8], row[14], now)
    return WorkerInfo(
        id=row[0],
        host=row[1],
        pid=row[2],
        queues=tuple(row[3]),
        labels=tuple(row[4]),
        concurrency=row[5],
        version=row[6],
        started_at=row[7],
        heartbeat_at=row[8],
        state=state,
        running=tuple(row[10]),
        namespace=row[11],
        tasks=tuple(row[12]),
        drain_requested=row[13],
        lease_seconds=row[14],
    )
