"""Rows and records: the column lists and converters shared by the SQL stores.

Both stores select the same columns in the same order, so one mapping serves them, and a
column added to one store's queries is added to the other's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .. import run_figures
from ..model import (
    Attempt,
    Children,
    ErrorInfo,
    FanOut,
    FanOutKind,
    Job,
    JobSpec,
    Lane,
    Misfire,
    NewRun,
    Overlap,
    Run,
)
from ..states import AttemptOutcome, RunState
from .logic import initial_state

Row = tuple[Any, ...]

RUN_COLUMNS = """
    r.id, r.task, r.queue, r.state, r.priority, r.lane, r.eta, r.attempts, r.used,
    r.max_attempts, r.timeout, r.idempotency_key, r.created_at, r.updated_at, r.finished_at,
    r.lease_owner, r.lease_expires, r.attempt_id, r.target_worker, r.route_key,
    p.args, p.kwargs, a.result, a.error_type, a.error_message, a.traceback, r.job_id, r.fire_at,
    r.namespace, r.route, r.route_labels, r.limit_key, r.rate_key, r.parent_id, r.child_index,
    r.shard_total, f.kind, f.total, f.ended, f.succeeded, f.reduce_run, f.note,
    a.worker_id, r.lost, ra.result,
    (SELECT x.started_at FROM attempts x WHERE x.run_id = r.id ORDER BY x.id LIMIT 1), rr.task
"""
# A fan-out parent's counters come with it (fanouts is keyed by the parent's id; most runs have
# no row there, which the primary key answers at once), and a map-reduce parent's reduce run's
# result (run_figures.shown_result). The first attempt's start is one seek of attempts_by_run.
RUN_FROM = """
    FROM runs r
    LEFT JOIN run_payloads p ON p.run_id = r.id
    LEFT JOIN attempts a ON a.id = r.attempt_id
    LEFT JOIN fanouts f ON f.run_id = r.id
    LEFT JOIN runs rr ON rr.id = f.reduce_run
    LEFT JOIN attempts ra ON ra.id = rr.attempt_id
"""

JOB_COLUMNS = """
    id, name, task, trigger, args, kwargs, queue, priority, max_attempts, timeout, misfire,
    misfire_grace, misfire_max, overlap, children, calendars, max_fires, source, paused, enabled,
    next_fire_at, fires, last_fire_at, created_at, updated_at, spec_hash, namespace, broadcast,
    shards
"""


def job_params(spec: JobSpec, next_fire_at: float | None, now: float) -> dict[str, Any]:
    """The named parameters of :data:`UPSERT_JOB`."""
    return {
        "name": spec.name,
        "task": spec.task,
        "trigger": json.dumps(spec.trigger, sort_keys=True),
        "after_seconds": spec.after_seconds,
        "args": spec.args_json,
        "kwargs": spec.kwargs_json,
        "queue": spec.queue,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "timeout": spec.timeout,
        "misfire": spec.misfire.value,
        "misfire_grace": spec.misfire_grace,
        "misfire_max": spec.misfire_max,
        "overlap": spec.overlap.value,
        "children": json.dumps(list(spec.children)),
        "calendars": json.dumps(list(spec.calendars)),
        "max_fires": spec.max_fires,
        "source": spec.source,
        "spec_hash": spec.spec_hash(),
        "paused": int(spec.paused),
        "namespace": spec.namespace,
        # A bool: SQLite stores it as 1/0, PostgreSQL's column is boolean.
        "broadcast": spec.broadcast,
        "shards": spec.shards,
        "next_fire_at": next_fire_at,
        "now": now,
    }


def job_from_row(row: tuple[Any, ...]) -> Job:
    """A :class:`Job` from a row of ``_COLUMNS``."""
    spec = JobSpec(
        name=row[1],
        task=row[2],
        trigger=_trigger_spec(row[3]),
        args_json=row[4],
        kwargs_json=row[5],
        queue=row[6],
        priority=row[7],
        max_attempts=row[8],
        timeout=row[9],
        misfire=Misfire(row[10]),
        misfire_grace=row[11],
        misfire_max=row[12],
        overlap=Overlap(row[13]),
        children=tuple(json.loads(row[14])),
        calendars=tuple(json.loads(row[15])),
        max_fires=row[16],
        source=row[17],
        paused=bool(row[18]),
        namespace=row[26],
        broadcast=bool(row[27]),
        shards=row[28],
    )
    return Job(
        id=row[0],
        spec=spec,
        enabled=bool(row[19]),
        next_fire_at=row[20],
        fires=row[21],
        last_fire_at=row[22],
        created_at=row[23],
        updated_at=row[24],
        digest=row[25],
    )


def error_from_row(type_: str | None, message: str | None, tb: str | None) -> ErrorInfo | None:
    """The error of an attempt, if it has one."""
    if type_ is None:
        return None
    return ErrorInfo(type=type_, message=message or "", traceback=tb or "")


def run_from_row(row: Row) -> Run:
    """A :class:`Run` from a row of :data:`RUN_COLUMNS`, with the figures
    :mod:`cronbus.run_figures` derives at the store edge (its shown result and tries)."""
    state = RunState(row[3])
    children = _children(row)
    own = json.loads(row[22]) if row[22] is not None else None
    reduce_result = json.loads(row[44]) if row[44] is not None else None
    return Run(
        id=row[0],
        task=row[1],
        queue=row[2],
        state=state,
        priority=row[4],
        lane=Lane(row[5]),
        eta=row[6],
        attempts=row[7],
        max_attempts=row[9],
        timeout=row[10],
        idempotency_key=row[11],
        created_at=row[12],
        updated_at=row[13],
        finished_at=row[14],
        lease_owner=row[15],
        lease_expires=row[16],
        attempt_id=row[17],
        target_worker=row[18],
        route_key=row[19],
        args=json.loads(row[20]) if row[20] is not None else [],
        kwargs=json.loads(row[21]) if row[21] is not None else {},
        result=run_figures.shown_result(own, children, reduce_result),
        error=error_from_row(row[23], row[24], row[25]),
        job_id=row[26],
        fire_at=row[27],
        namespace=row[28],
        route=row[29],
        route_labels=decode_list(row[30]),
        limit_key=row[31],
        rate_key=row[32],
        parent_id=row[33],
        child_index=row[34],
        shard_total=row[35],
        children=children,
        tries=run_figures.tries(row[8], state),
        lost=row[43],
        started_at=row[45],
        worker_id=row[42],
    )


def _children(row: Row) -> Children | None:
    """A fan-out parent's counters (the ``fanouts`` columns of :data:`RUN_COLUMNS`)."""
    if row[36] is None:
        return None
    return Children(
        kind=FanOutKind(row[36]),
        total=row[37],
        ended=row[38],
        succeeded=row[39],
        reduce_run_id=row[40],
        reduce_task=row[46],
        note=row[41] or "",
    )


def decode_list(value: Any) -> tuple[str, ...]:
    """A list column: JSON text in SQLite, an array (already a list) in PostgreSQL, or NULL."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = json.loads(value)
    return tuple(str(item) for item in value)


WAITING_BROADCAST_COLUMNS = """
    r.id, r.updated_at, r.attempts, r.job_id, r.parent_id, r.child_index, r.task, r.queue,
    r.priority, r.eta, r.max_attempts, r.timeout, r.namespace, r.route, r.route_key,
    r.route_labels, r.route_order, r.limit_key, r.limit_max, r.rate_key, r.rate_max,
    r.rate_period, p.args, p.kwargs, p.trace
"""
"""A broadcast parent that waits for a live worker: its place, then its run as a template.
Its wait counts from ``updated_at``: its insert, or the requeue that revived it (nothing else
changes a parent without children while it waits)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingBroadcast:
    """A broadcast parent without children yet (a row of :data:`WAITING_BROADCAST_COLUMNS`)."""

    id: int
    since: float
    """Since when it waits: its creation, or its requeue."""
    attempts: int
    job_id: int | None
    parent_id: int | None
    child_index: int | None
    run: NewRun
    """The parent as it was deferred (its fan-out a broadcast), to expand as at its insert."""


def waiting_broadcast(row: Row) -> WaitingBroadcast:
    """A row of :data:`WAITING_BROADCAST_COLUMNS` (either store: lists decoded by
    :func:`decode_list`)."""
    run = NewRun(
        task=row[6],
        queue=row[7],
        priority=row[8],
        eta=row[9],
        max_attempts=row[10],
        timeout=row[11],
        namespace=row[12],
        route=row[13],
        route_key=row[14],
        route_labels=decode_list(row[15]),
        route_order=decode_list(row[16]),
        limit_key=row[17],
        limit_max=row[18],
        rate_key=row[19],
        rate_max=row[20],
        rate_period=row[21],
        args_json=row[22],
        kwargs_json=row[23],
        trace=row[24],
        fanout=FanOut(kind=FanOutKind.BROADCAST),
    )
    return WaitingBroadcast(
        id=row[0],
        since=row[1],
        attempts=row[2],
        job_id=row[3],
        parent_id=row[4],
        child_index=row[5],
        run=run,
    )


def attempt_from_row(row: Row) -> Attempt:
    """An :class:`Attempt` from a row of ``id, run_id, number, worker_id, started_at,
    finished_at, outcome, result, error_type, error_message, traceback, logs``."""
    return Attempt(
        id=row[0],
        run_id=row[1],
        number=row[2],
        worker_id=row[3],
        started_at=row[4],
        finished_at=row[5],
        outcome=AttemptOutcome(row[6]) if row[6] is not None else None,
        result=json.loads(row[7]) if row[7] is not None else None,
        error=error_from_row(row[8], row[9], row[10]),
        logs=row[11] or "",
    )


def _trigger_spec(text: str) -> dict[str, Any]:
    """A stored trigger spec; one that is not a JSON object (a row written by hand or damaged)
    becomes a spec that every trigger reader refuses, so the job is shown and paused as having
    an invalid trigger instead of breaking every listing and the scheduler."""
    try:
        spec = json.loads(text)
    except (TypeError, ValueError):
        spec = None
    if isinstance(spec, dict):
        return spec
    return {"unreadable": str(text)[:80]}


def new_run_values(run: NewRun, now: float) -> tuple[Any, ...]:
    """The values both stores insert for a new run, in their common column order (task, queue,
    state, priority, eta, max_attempts, timeout, idempotency_key, target_worker, route_key,
    job_id, fire_at, concurrency_key, overlap, namespace); each store adds its own columns after
    them (see :func:`distribution_values`). A parent to expand (``run.fanout``) starts waiting
    for its children, which the store inserts in the same transaction."""
    return (
        run.task,
        run.queue,
        (RunState.WAITING if run.fanout is not None else initial_state(run.eta, now)).value,
        run.priority,
        run.eta,
        run.max_attempts,
        run.timeout,
        run.idempotency_key,
        run.target_worker,
        run.route_key,
        run.job_id,
        run.fire_at,
        run.concurrency_key,
        run.overlap.value,
        run.namespace,
    )


DISTRIBUTION_COLUMNS = (
    "route",
    "route_labels",
    "route_order",
    "limit_key",
    "limit_max",
    "rate_key",
    "rate_max",
    "rate_period",
    "parent_id",
    "child_index",
    "shard_total",
)
"""The runs columns of :func:`distribution_values`, in its order."""


def distribution_values(run: NewRun) -> tuple[Any, ...]:
    """A new run's routing, limit and fan-out columns, in the order of
    :data:`DISTRIBUTION_COLUMNS`. Lists (``route_labels``, ``route_order``) come as tuples, or
    None when empty; each store encodes them (JSON text in SQLite, text[] in PostgreSQL)."""
    return (
        run.route,
        tuple(run.route_labels) or None,
        tuple(run.route_order) or None,
        run.limit_key,
        run.limit_max,
        run.rate_key,
        run.rate_max,
        run.rate_period,
        run.parent_id,
        run.child_index,
        run.shard_total,
    )


def plain(run: NewRun) -> bool:
    """Whether a new run uses none of routing, limits or fan-out (its distribution columns all
    take their defaults), so a store may insert it with its plain statement."""
    return (
        run.route == "any"
        and not run.route_labels
        and run.limit_key is None
        and run.rate_key is None
        and run.parent_id is None
        and run.fanout is None
    )
