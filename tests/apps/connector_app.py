"""An app with test connectors of its own kinds, for the connector runtime's tests.

``test-counter`` (source) counts 1..``count`` into its topic, ``per_poll`` records a poll;
a record whose number is a multiple of ``bad_every`` carries data that is not JSON (a record
failure), and ``retriable_polls`` first polls raise :class:`RetriableError`. It writes each
``commit_record`` call as a JSON line to ``commits`` (a file path), so tests see them from any
process.

``test-lines`` (sink) appends each event's subject to the file ``path`` on put and makes it
durable on flush; subjects listed in ``refuse`` are refused by put, those in ``lose`` fail in
the final write (``RecordErrors``), and the first ``retriable_puts`` puts refuse every record
with a :class:`RetriableError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cronbus import App
from cronbus.connectors import (
    RecordErrors,
    RecordMetadata,
    RetriableError,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SourceConnector,
    SourceRecord,
    SourceTask,
)
from cronbus.errors import ConnectorConfigError

app = App(store=os.environ.get("CRONBUS_STORE"))


class CounterTask(SourceTask):
    """Counts up to ``count``, resuming after the committed position."""

    def start(self, config: Mapping[str, Any], positions: Mapping[str, Any]) -> None:
        self.count = int(config["count"])
        self.per_poll = int(config.get("per_poll", 10))
        self.bad_every = int(config.get("bad_every", 0))
        self.retriable = int(config.get("retriable_polls", 0))
        self.commits = config.get("commits")
        self.next = int(positions.get("counter", 0)) + 1

    def poll(self) -> Sequence[SourceRecord]:
        if self.retriable > 0:
            self.retriable -= 1
            raise RetriableError("the counter is busy")
        last = min(self.count, self.next + self.per_poll - 1)
        records = []
        for n in range(self.next, last + 1):
            bad = self.bad_every and n % self.bad_every == 0
            records.append(
                SourceRecord(
                    partition="counter",
                    position=n,
                    data={"n": n, "bad": {1, 2}} if bad else {"n": n},
                    type="counter.tick",
                    id=f"tick-{n}",
                    subject=str(n),
                    key=str(n % 3),
                )
            )
        self.next = last + 1
        return records

    def commit_record(
        self, record: SourceRecord, metadata: RecordMetadata | None, error: BaseException | None
    ) -> None:
        if self.commits is None:
            return
        line = {
            "n": record.position,
            "offset": None if metadata is None else metadata.offset,
            "created": None if metadata is None else metadata.created,
            "error": None if error is None else type(error).__name__,
        }
        with open(self.commits, "a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")


@app.connector_kinds.register
class Counter(SourceConnector):
    """``test-counter``: numbers into a topic."""

    kind = "test-counter"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(config.get("count"), int) or config["count"] < 0:
            raise ConnectorConfigError("config.count: must be a whole number >= 0")
        return dict(config)

    def task(self) -> SourceTask:
        return CounterTask()


class LinesTask(SinkTask):
    """Writes subjects, one per line."""

    def start(self, config: Mapping[str, Any]) -> None:
        self.path = Path(config["path"])
        self.refuse = set(config.get("refuse", ()))
        self.lose = set(config.get("lose", ()))
        self.retriable = int(config.get("retriable_puts", 0))
        self.file = self.path.open("a", encoding="utf-8")
        self.unflushed: list[SinkRecord] = []

    def put(self, records: Sequence[SinkRecord]) -> Sequence[BaseException | None]:
        if self.retriable > 0:
            self.retriable -= 1
            return [RetriableError("the sink is busy")] * len(records)
        outcomes: list[BaseException | None] = []
        for record in records:
            if record.subject in self.refuse:
                outcomes.append(ValueError(f"refused {record.subject}"))
                continue
            self.unflushed.append(record)
            outcomes.append(None)
        return outcomes

    def flush(self, positions: Mapping[str, int]) -> None:
        lost = {
            r.id: OSError(f"lost {r.subject}") for r in self.unflushed if r.subject in self.lose
        }
        for record in self.unflushed:
            if record.id not in lost:
                self.file.write(f"{record.subject}\n")
        self.file.flush()
        os.fsync(self.file.fileno())
        self.unflushed.clear()
        if lost:
            raise RecordErrors(lost)

    def stop(self) -> None:
        self.file.close()


@app.connector_kinds.register
class Lines(SinkConnector):
    """``test-lines``: subjects into a file."""

    kind = "test-lines"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(config.get("path"), str):
            raise ConnectorConfigError("config.path: required")
        return dict(config)

    def task_configs(self, config: Mapping[str, Any], max_tasks: int) -> list[dict[str, Any]]:
        return [{**config, "path": f"{config['path']}.{i}"} for i in range(max_tasks)]

    def task(self) -> SinkTask:
        return LinesTask()
