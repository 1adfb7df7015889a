"""Named SQL of the SQLite store's connectors, and its rows turned into records.

Every state written or matched comes from the task state machine
(:mod:`cronbus.connectors.states`), never typed by hand.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...connectors.records import (
    JSON,
    Connector,
    ConnectorSpec,
    ConnectorTask,
    DeadRecord,
    Direction,
    NewDeadRecord,
    TaskCounts,
    Tolerance,
)
from ...connectors.states import HELD, TaskEvent, TaskState, sources, transition
from ...states import sql_match

Row = Sequence[Any]

E = TaskEvent
TAKEABLE = frozenset(s for s in TaskState if s.takeable)
"""Tasks a worker may take at once (``unassigned``)."""
ASSIGNED = transition(TaskState.UNASSIGNED, E.ASSIGN)
"""A task's state once taken (``running``)."""
LOST = transition(ASSIGNED, E.LOSE)
"""A released task's state (``unassigned``)."""
FAILED = transition(ASSIGNED, E.FAIL)

# -- definitions ---------------------------------------------------------------------------------
# Creation only: the insert decides a race between two creates of one name (the primary key).
CREATE_CONNECTOR = """
INSERT INTO connectors (name, namespace, kind, direction, topic, config, tolerance, max_tasks,
                        fingerprint, created_at, updated_at)
VALUES (:name, :namespace, :kind, :direction, :topic, :config, :tolerance, :max_tasks,
        :fingerprint, :now, :now)
ON CONFLICT (name) DO NOTHING
"""
INSERT_TASK = f"""
INSERT INTO connector_tasks (connector, task, config, state, epoch, positions, updated_at)
VALUES (?, ?, ?, '{TaskState.UNASSIGNED}', 0, '{{}}', ?)
"""
FINGERPRINT = "SELECT fingerprint FROM connectors WHERE name = ?"
_CONNECTOR_COLUMNS = """
    c.name, c.namespace, c.kind, c.direction, c.topic, c.config, c.tolerance, c.max_tasks,
    c.created_at, c.updated_at,
    t.task, t.config, t.state, t.holder, t.lease_expires_at, t.epoch, t.error, t.positions,
    t.delivered, t.dead, t.retried, t.updated_at
"""
# One statement, so a connector and its tasks are read from one snapshot.
GET_CONNECTOR = f"""
SELECT {_CONNECTOR_COLUMNS}
FROM connectors c LEFT JOIN connector_tasks t ON t.connector = c.name
WHERE c.name = ? ORDER BY t.task
"""
LIST_CONNECTORS = f"""
SELECT {_CONNECTOR_COLUMNS}
FROM connectors c LEFT JOIN connector_tasks t ON t.connector = c.name
WHERE :namespace IS NULL OR c.namespace = :namespace
ORDER BY c.name, t.task
"""
TASK_STATES = "SELECT task, state FROM connector_tasks WHERE connector = ? ORDER BY task"
# A command: the new state is the state machine's; a task that leaves `running` loses its
# holder, and the epoch moves on leaving `running` and on a restart, fencing the old holder.
# No command leads to `failed`, so every command clears the error (it says why a task failed).
COMMAND_TASK = """
UPDATE connector_tasks SET state = :state, error = NULL,
    holder = CASE WHEN :held THEN holder END,
    lease_expires_at = CASE WHEN :held THEN lease_expires_at END,
    epoch = epoch + :bump, updated_at = :now
WHERE connector = :connector AND task = :task
"""
TOUCH_CONNECTOR = "UPDATE connectors SET updated_at = ? WHERE name = ?"
DELETE_CONNECTOR = "DELETE FROM connectors WHERE name = ?"
DELETE_TASKS = "DELETE FROM connector_tasks WHERE connector = ?"
DELETE_DEAD = "DELETE FROM connector_dead_records WHERE connector = ?"

# -- leases --------------------------------------------------------------------------------------
# A holder renews its own leases even after they ran out, as long as nobody took them over.
RENEW_TASKS = f"""
UPDATE connector_tasks SET lease_expires_at = :expires
WHERE holder = :holder AND {sql_match("state", HELD)}
RETURNING connector, task, epoch
"""
# Unassigned tasks, and running ones whose lease ran out (``lose`` then ``assign``), oldest
# connector first. The write lock is held, so two holders never take the same task.
TAKE_TASKS = f"""
UPDATE connector_tasks SET state = '{ASSIGNED}', holder = :holder, lease_expires_at = :expires,
    epoch = epoch + 1, updated_at = :now
WHERE (connector, task) IN (
    SELECT t.connector, t.task FROM connector_tasks t JOIN connectors c ON c.name = t.connector
    WHERE {sql_match("t.state", TAKEABLE)}
       OR ({sql_match("t.state", sources(E.LOSE))} AND t.lease_expires_at < :now)
    ORDER BY c.created_at, c.name, t.task LIMIT :limit)
RETURNING connector, task, epoch
"""
_FENCED = f"""
WHERE connector = :connector AND task = :task AND holder = :holder AND epoch = :epoch
  AND {sql_match("state", HELD)}
"""
RELEASE_TASK = f"""
UPDATE connector_tasks SET state = '{LOST}', holder = NULL, lease_expires_at = NULL,
    updated_at = :now
{_FENCED} AND {sql_match("state", sources(E.LOSE))}
"""
FAIL_TASK = f"""
UPDATE connector_tasks SET state = '{FAILED}', error = :error, holder = NULL,
    lease_expires_at = NULL, updated_at = :now
{_FENCED} AND {sql_match("state", sources(E.FAIL))}
"""
# The fence: the lease's holder and epoch on a running task. A lease that ran out but that
# nobody took over still passes (its holder renews it on its next acquire).
FENCE = f"""
SELECT c.topic, c.namespace, t.positions
FROM connector_tasks t JOIN connectors c ON c.name = t.connector
WHERE t.connector = :connector AND t.task = :task AND t.holder = :holder AND t.epoch = :epoch
  AND {sql_match("t.state", HELD)}
"""
APPLY_COMMIT = """
UPDATE connector_tasks SET positions = :positions, delivered = delivered + :delivered,
    dead = dead + :dead, retried = retried + :retried, updated_at = :now
WHERE connector = :connector AND task = :task
"""
INSERT_DEAD = """
INSERT INTO connector_dead_records (connector, task, partition, "offset", record, error,
                                    created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""
CONNECTOR_EXISTS = "SELECT 1 FROM connectors WHERE name = ?"
LIST_DEAD = """
SELECT id, connector, task, record, error, partition, "offset", created_at
FROM connector_dead_records
WHERE connector = :name AND (:before IS NULL OR id < :before)
ORDER BY id DESC LIMIT :limit
"""


# -- rows ----------------------------------------------------------------------------------------


def connector_params(spec: ConnectorSpec, now: float) -> dict[str, Any]:
    """The named parameters of :data:`CREATE_CONNECTOR`."""
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "kind": spec.kind,
        "direction": spec.direction.value,
        "topic": spec.topic,
        "config": json.dumps(spec.config, sort_keys=True),
        "tolerance": spec.tolerance.value,
        "max_tasks": spec.max_tasks,
        "fingerprint": spec.fingerprint(),
        "now": now,
    }


def task_params(name: str, configs: Sequence[Mapping[str, JSON]], now: float) -> list[Row]:
    """The parameters of :data:`INSERT_TASK`: task ``i`` runs ``configs[i]``."""
    return [(name, i, json.dumps(c, sort_keys=True), now) for i, c in enumerate(configs)]


def dead_params(connector: str, task: int, dead: Sequence[NewDeadRecord], now: float) -> list[Row]:
    """The parameters of :data:`INSERT_DEAD`, one row per record."""
    return [
        (connector, task, d.partition, d.offset, json.dumps(d.record), d.error, now) for d in dead
    ]


def merged(stored: str, positions: Mapping[str, JSON]) -> str:
    """Stored positions with ``positions`` laid over them, partition by partition (a new
    position replaces the old one whole, whatever its shape)."""
    return json.dumps({**json.loads(stored), **positions})


def connectors_from_rows(rows: Sequence[Row]) -> list[Connector]:
    """Connectors from rows of :data:`GET_CONNECTOR` / :data:`LIST_CONNECTORS` (grouped by
    name, tasks in order)."""
    out: list[Connector] = []
    tasks: list[ConnectorTask] = []
    for i, row in enumerate(rows):
        if row[10] is not None:
            tasks.append(_task_from_row(row))
        if i + 1 == len(rows) or rows[i + 1][0] != row[0]:
            out.append(_connector_from_row(row, tuple(tasks)))
            tasks = []
    return out


def _connector_from_row(row: Row, tasks: tuple[ConnectorTask, ...]) -> Connector:
    spec = ConnectorSpec(
        name=row[0],
        namespace=row[1],
        kind=row[2],
        direction=Direction(row[3]),
        topic=row[4],
        config=json.loads(row[5]),
        tolerance=Tolerance(row[6]),
        max_tasks=row[7],
    )
    return Connector(spec=spec, tasks=tasks, created_at=row[8], updated_at=row[9])


def _task_from_row(row: Row) -> ConnectorTask:
    return ConnectorTask(
        connector=row[0],
        index=row[10],
        config=json.loads(row[11]),
        state=TaskState(row[12]),
        holder=row[13],
        lease_expires_at=row[14],
        epoch=row[15],
        error=row[16],
        counts=TaskCounts(delivered=row[18], dead=row[19], retried=row[20]),
        positions=json.loads(row[17]),
        updated_at=row[21],
    )


def dead_from_row(row: Row) -> DeadRecord:
    """A :class:`DeadRecord` from a row of :data:`LIST_DEAD`."""
    return DeadRecord(
        id=row[0],
        connector=row[1],
        task=row[2],
        record=json.loads(row[3]),
        error=row[4],
        partition=row[5],
        offset=row[6],
        created_at=row[7],
    )
