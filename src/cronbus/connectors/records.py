"""What the store keeps of connectors: their definitions, tasks, leases, positions and dead
letters (plain values; the store's connector roles take and give these)."""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .states import TaskState

JSON = Any


class Direction(enum.StrEnum):
    """Which way a connector moves data."""

    SOURCE = "source"
    SINK = "sink"


class Tolerance(enum.StrEnum):
    """What a record that fails for good does: ``none`` fails the task (saying why), ``all``
    sends the record to the connector's dead letters and the task goes on."""

    NONE = "none"
    ALL = "all"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectorSpec:
    """A connector as created: its name, kind and validated config.

    ``config`` is the kind's validated config (``topic`` included); ``tolerance``,
    ``max_tasks`` and the retry settings are the runtime's, the same for every kind.
    """

    name: str
    kind: str
    direction: Direction
    topic: str
    config: Mapping[str, JSON]
    tolerance: Tolerance = Tolerance.NONE
    max_tasks: int = 1
    namespace: str = "default"

    def fingerprint(self) -> str:
        """A hash of everything that defines the connector (a create with the same fingerprint
        is a no-op; another under the same name is a conflict)."""
        doc = {
            "kind": self.kind,
            "direction": self.direction.value,
            "topic": self.topic,
            "config": self.config,
            "tolerance": self.tolerance.value,
            "max_tasks": self.max_tasks,
            "namespace": self.namespace,
        }
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskCounts:
    """Per-record outcomes of a task since it was created: records delivered (into the topic
    for a source, written for a sink), records sent to dead letters, and retries spent."""

    delivered: int = 0
    dead: int = 0
    retried: int = 0

    def __add__(self, other: TaskCounts) -> TaskCounts:
        return TaskCounts(
            delivered=self.delivered + other.delivered,
            dead=self.dead + other.dead,
            retried=self.retried + other.retried,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectorTask:
    """One task of a connector: its config, state, holder and committed positions."""

    connector: str
    index: int
    config: Mapping[str, JSON]
    state: TaskState
    holder: str | None
    """The worker holding the task's lease (only while ``running``)."""
    lease_expires_at: float | None
    epoch: int
    """Bumped on every assignment and restart: fences an older holder."""
    error: str | None
    """Why the task failed (state ``failed``), else None."""
    counts: TaskCounts
    positions: Mapping[str, JSON]
    """The committed position of each partition (a source's) or topic offset (a sink's)."""
    updated_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Connector:
    """A stored connector with its tasks (by index)."""

    spec: ConnectorSpec
    tasks: tuple[ConnectorTask, ...]
    created_at: float
    updated_at: float

    @property
    def name(self) -> str:
        """The connector's name."""
        return self.spec.name


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectorLease:
    """A worker's hold on one connector task; ``epoch`` fences a holder that lost it."""

    connector: str
    task: int
    holder: str
    epoch: int
    expires_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class NewDeadRecord:
    """A record that failed for good (tolerance ``all``): the record as it was, and why."""

    record: Mapping[str, JSON]
    """The original record: a source record's fields, or a sink record's CloudEvent."""
    error: str
    partition: str | None = None
    offset: int | None = None
    """The topic offset of a sink's record (None for a source's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadRecord:
    """A record in a connector's dead letters."""

    id: int
    connector: str
    task: int
    record: Mapping[str, JSON]
    error: str
    partition: str | None
    offset: int | None
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """What a task stores in one transaction, fenced by its lease: new positions (merged into
    the stored ones, partition by partition), records that went to dead letters, and the
    outcome counts to add."""

    positions: Mapping[str, JSON] = field(default_factory=dict)
    dead: tuple[NewDeadRecord, ...] = ()
    counts: TaskCounts = field(default_factory=TaskCounts)
