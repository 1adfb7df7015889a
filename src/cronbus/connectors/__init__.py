"""Connectors: source and sink tasks that move data between topics and other systems.

:mod:`.api` is what a plugin implements (:class:`SourceConnector` / :class:`SourceTask`,
:class:`SinkConnector` / :class:`SinkTask`); :mod:`.states` is the task state machine;
:mod:`.records` what the store keeps. Positions move only after delivery: a source's records
and its new positions are written in one store transaction, a sink's position only after its
flush.
"""

from __future__ import annotations

from .api import (
    Connector,
    RecordErrors,
    RecordMetadata,
    RetriableError,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SourceConnector,
    SourceRecord,
    SourceTask,
    TaskError,
)
from .states import TaskState

__all__ = [
    "Connector",
    "RecordErrors",
    "RecordMetadata",
    "RetriableError",
    "SinkConnector",
    "SinkRecord",
    "SinkTask",
    "SourceConnector",
    "SourceRecord",
    "SourceTask",
    "TaskError",
    "TaskState",
]
