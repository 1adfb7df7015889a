"""``file-source`` and ``file-sink``: JSON lines files in and out of a topic.

Both touch only files under the directories the operator allows (``CRONBUS_CONNECTOR_FILES``,
:mod:`cronbus.connectors.allow`): a path must be absolute, without ``..``, and inside one of
them once its symlinks are followed; checked at create and again each time the file is opened
(a poll of a source, the start of a sink), so a symlink changed since is refused too.

``file-source`` config (``validate`` fills in the defaults)::

    path          the file to read (absolute)
    topic         the topic to append to
    type          "file.line", the events' type
    poll_seconds  1.0
    batch         1000 lines per poll at most

It reads the file as JSON lines: each line's JSON value becomes an event's ``data``, except a
CloudEvent (an object with ``specversion``), whose ``id``, ``type``, ``subject``, ``data``,
``partitionkey`` and ``time`` are kept. Its one partition is ``file:<path>``; a record's
position is the byte offset just after its line, so a restarted task seeks there. Only
complete lines (ending in ``\\n``) are read: a partial last line waits until it is finished.
Blank lines are skipped. Ids are left to the runtime (derived from the partition and the
position, hence stable), except a CloudEvent's own. A file shorter than the committed
position (truncated or replaced) fails the poll rather than re-reading from 0: ids derived
from re-used offsets would wrongly match events already in the topic.

**Bad lines** (not UTF-8, not JSON, JSON cronbus cannot store, or a CloudEvent that does not
validate) are bad records (:attr:`~cronbus.connectors.api.SourceRecord.error`), never
appended: with tolerance ``all`` they go to the connector's dead letters with their
``{"path", "offset", "line"}`` and the error, and the position moves past them; with ``none``
the task fails naming the line's byte offset.

``file-sink`` config::

    path          the file to append to (absolute; created if missing)
    topic         the topic to read

It appends one CloudEvent per line (``to_cloudevent()`` as compact JSON) in topic order, and
``flush`` writes the buffer and fsyncs the file. A record whose CloudEvent is not JSON
fails alone. Records put after the last flush are put again after a crash, so a reader of the
file deduplicates by ``id``. A crash can also cut the last line short (SIGKILL stops a
``write`` at a page boundary, a power loss drops unsynced pages): left there, the next line
would be glued to it and neither would be JSON. So before appending, the task cuts off a last
line of its own (by how it starts) that has no newline: its record is past the committed
offset, so it is put again. Any other unterminated last line (the file was not the sink's) is
ended with a newline instead, its bytes kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from ...errors import InvalidArgumentError
from ...events.event import Event
from ...serialization import check_json
from ..allow import NOWHERE, Reach, Reaching, allowed_file, open_allowed
from ..api import (
    JSON,
    Config,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SourceConnector,
    SourceRecord,
    SourceTask,
)
from .config import Fields, config_error

INVALID_TYPE = "file.invalid"
"""The type of the events a file source makes of its bad lines."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSourceConfig:
    """A validated ``file-source`` config."""

    path: str
    topic: str
    type: str
    poll_seconds: float
    batch: int

    @classmethod
    def read(cls, config: Config) -> FileSourceConfig:
        """Check ``config``; :class:`~cronbus.errors.ConnectorConfigError` names the field."""
        fields = Fields(config)
        settings = cls(
            path=fields.text("path"),
            topic=fields.topic(publish=True),
            type=fields.event_type("type", "file.line"),
            poll_seconds=fields.number("poll_seconds", 1.0),
            batch=fields.integer("batch", 1000, high=100_000),
        )
        fields.done()
        return settings

    @property
    def partition(self) -> str:
        """The one partition the task's positions are kept under."""
        return f"file:{self.path}"


class FileSourceConnector(Reaching, SourceConnector):
    """Reads a JSON lines file as it grows (one task)."""

    kind = "file-source"

    def validate(self, config: Config) -> dict[str, JSON]:
        """The config checked (its path one the operator allows), defaults filled in."""
        settings = FileSourceConfig.read(config)
        allowed_file(settings.path, self.reach)
        return dataclasses.asdict(settings)

    def task_configs(self, config: Config, max_tasks: int) -> list[dict[str, JSON]]:
        """One task: a file is read in order, by one reader."""
        return [dict(config)]

    def task(self) -> FileSourceTask:
        """A new, unstarted task."""
        return FileSourceTask(self.reach)


class FileSourceTask(SourceTask):
    """Reads the complete lines past its byte offset (the file is opened per poll: no handle
    is held between polls)."""

    def __init__(self, reach: Reach = NOWHERE) -> None:
        self._reach = reach
        self._settings: FileSourceConfig | None = None
        self._offset = 0

    def start(self, config: Config, positions: Mapping[str, JSON]) -> None:
        """Resume at the committed byte offset (0 on the first start)."""
        settings = self._settings = FileSourceConfig.read(config)
        allowed_file(settings.path, self._reach)
        offset = positions.get(settings.partition, 0)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"position of {settings.partition!r} is not a byte offset: {offset!r}")
        self._offset = offset

    def poll(self) -> list[SourceRecord]:
        """The complete lines after the offset, at most ``batch`` of them."""
        settings = self._config()
        records: list[SourceRecord] = []
        # Checked at each open: the path's symlinks may have moved since the create.
        with os.fdopen(open_allowed(settings.path, self._reach, os.O_RDONLY), "rb") as file:
            self._check_size(file)
            file.seek(self._offset)
            while len(records) < settings.batch:
                line = file.readline()
                if not line.endswith(b"\n"):
                    break  # end of file, or a line still being written
                start, self._offset = self._offset, self._offset + len(line)
                record = self._record(line, start, self._offset)
                if record is not None:
                    records.append(record)
        return records

    def _config(self) -> FileSourceConfig:
        if self._settings is None:
            raise RuntimeError("file-source task polled before start()")
        return self._settings

    def _check_size(self, file: BinaryIO) -> None:
        size = os.fstat(file.fileno()).st_size
        if size < self._offset:
            raise ValueError(
                f"{self._config().path} has {size} bytes, fewer than the committed position "
                f"{self._offset}: it was truncated or replaced (recreate the connector to read "
                "it from the start)"
            )

    def _record(self, line: bytes, start: int, end: int) -> SourceRecord | None:
        settings = self._config()
        try:
            text = line.decode("utf-8")
            if not text.strip():
                return None
            value = json.loads(text, parse_constant=_refuse_constant)
            if isinstance(value, dict) and "specversion" in value:
                return _cloudevent_record(settings.partition, end, value)
            check_json(value, "the line")  # a NUL in a string is JSON, yet not storable
        except (ValueError, InvalidArgumentError) as exc:  # UnicodeDecodeError is a ValueError
            return self._invalid(line, start, end, exc)
        return SourceRecord(
            partition=settings.partition, position=end, data=value, type=settings.type
        )

    def _invalid(self, line: bytes, start: int, end: int, error: Exception) -> SourceRecord:
        settings = self._config()
        # Shown, not parsed: undecodable bytes and NULs are escaped so the event can be stored.
        shown = line.rstrip(b"\r\n").decode("utf-8", "backslashreplace").replace("\x00", "\\x00")
        return SourceRecord(
            partition=settings.partition,
            position=end,
            data={"path": settings.path, "offset": start, "line": shown},
            type=INVALID_TYPE,
            error=f"line at byte {start}: {error}",
        )


def _cloudevent_record(partition: str, position: int, doc: dict[str, Any]) -> SourceRecord:
    event = Event.from_cloudevent(doc)
    return SourceRecord(
        partition=partition,
        position=position,
        data=event.data,
        type=event.type,
        id=event.id,
        subject=event.subject,
        key=event.key,
        # from_cloudevent stamps a missing time with now; the append time is the better one.
        time=event.time if doc.get("time") is not None else None,
    )


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSinkConfig:
    """A validated ``file-sink`` config."""

    path: str
    topic: str

    @classmethod
    def read(cls, config: Config) -> FileSinkConfig:
        """Check ``config``; :class:`~cronbus.errors.ConnectorConfigError` names the field."""
        fields = Fields(config)
        settings = cls(path=fields.text("path"), topic=fields.topic(publish=False))
        fields.done()
        return settings


class FileSinkConnector(Reaching, SinkConnector):
    """Appends a topic's events to a file, one CloudEvent JSON per line (one task)."""

    kind = "file-sink"

    def validate(self, config: Config) -> dict[str, JSON]:
        """The config checked (its path one the operator allows), defaults filled in."""
        settings = FileSinkConfig.read(config)
        allowed_file(settings.path, self.reach)
        return dataclasses.asdict(settings)

    def task_configs(self, config: Config, max_tasks: int) -> list[dict[str, JSON]]:
        """One task: two writers would interleave their lines."""
        return [dict(config)]

    def task(self) -> FileSinkTask:
        """A new, unstarted task."""
        return FileSinkTask(self.reach)


class FileSinkTask(SinkTask):
    """Appends lines to a buffered file, made durable by :meth:`flush`."""

    def __init__(self, reach: Reach = NOWHERE) -> None:
        self._reach = reach
        self._file: BinaryIO | None = None

    def start(self, config: Config) -> None:
        """Open the file for appending, creating it (and making its name durable) if missing;
        only where the operator allows (checked again now: symlinks may have moved)."""
        given = FileSinkConfig.read(config).path
        path = Path(allowed_file(given, self._reach))
        if not path.parent.is_dir():
            raise config_error("path", "must be in an existing directory", given)
        created = not path.exists()
        if not created:
            with os.fdopen(open_allowed(given, self._reach, os.O_RDWR), "r+b") as existing:
                _end_last_line(existing)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._file = os.fdopen(open_allowed(given, self._reach, flags), "ab")
        if created:
            _fsync_directory(path.parent)

    def put(self, records: Sequence[SinkRecord]) -> list[BaseException | None]:
        """Buffer one line per record; a record that is not JSON fails alone."""
        return [self._write(record) for record in records]

    def flush(self, positions: Mapping[str, int]) -> None:
        """Write the buffer and fsync the file."""
        file = self._open_file()
        file.flush()
        os.fsync(file.fileno())

    def stop(self) -> None:
        """Close the file (what was not flushed is put again by the runtime)."""
        if self._file is not None:
            file, self._file = self._file, None
            file.close()

    def _write(self, record: SinkRecord) -> BaseException | None:
        try:
            doc = record.to_cloudevent()
            text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            line = (text + "\n").encode("utf-8")  # whole before written: no half lines
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            return exc
        self._open_file().write(line)
        return None

    def _open_file(self) -> BinaryIO:
        if self._file is None:
            raise RuntimeError("file-sink task used before start() or after stop()")
        return self._file


_LINE_START = b'{"specversion":"1.0",'
"""How every line a file sink writes starts (compact JSON, ``specversion`` first)."""
_TAIL_CHUNK = 64 * 1024


def _end_last_line(file: BinaryIO) -> None:
    """Make ``file`` (open for reading and writing) end with a newline, durably, before
    appending to it: a last line of the sink's own cut short by a crash is cut off, any other
    unterminated line is ended."""
    size = file.seek(0, os.SEEK_END)
    start = _last_line_start(file, size)
    if start == size:
        return
    file.seek(start)
    if _LINE_START.startswith(file.read(len(_LINE_START))):
        file.truncate(start)
    else:
        file.seek(size)
        file.write(b"\n")
    file.flush()
    os.fsync(file.fileno())


def _last_line_start(file: BinaryIO, size: int) -> int:
    """The offset just after the last newline of ``file`` (0 without one)."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        file.seek(start)
        newline = file.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _fsync_directory(directory: Path) -> None:
    """Make a new file's directory entry durable (POSIX only; elsewhere nothing to do)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
