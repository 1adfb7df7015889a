"""Log lines as JSON, one object per line, with the run or subscription they are about.

``--log-format json`` (or ``CRONBUS_LOG_FORMAT=json``) on any role makes each record one line::

    {"time": "2026-12-02T01:02:03.456Z", "level": "INFO", "role": "worker",
     "logger": "cronbus.worker", "message": "run 7 add attempt 1 (try 1 of 1) succeeded",
     "action": "attempt.succeeded", "run": 7, "attempt": 1, "task": "add", "queue": "default"}

``run``, ``attempt``, ``task`` and ``queue`` come from the run a line is about: a record's own
fields (the worker's lines about ended attempts give them), else the attempt running in the
context that logged it. The worker binds each attempt with :func:`bound_run`, so what the task
itself logs, and cronbus's lines on the attempt's behalf, carry them without being told.
``subscription`` comes the same way from a dispatcher's pusher (:func:`bound_subscription`).
Context variables follow asyncio tasks; the worker carries them into its thread pool.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import Any, NamedTuple

from ..errors import ConfigurationError
from ..validation import shorten

__all__ = [
    "FORMATS",
    "FORMAT_VARIABLE",
    "JsonFormatter",
    "RunFields",
    "bound_run",
    "bound_subscription",
    "current_run",
    "log_format",
]

FORMAT_VARIABLE = "CRONBUS_LOG_FORMAT"
"""The log format of the roles when ``--log-format`` is not given."""
FORMATS = ("text", "json")


class RunFields(NamedTuple):
    """What a log line says about the run it is about."""

    run: int
    attempt: int
    """The attempt's number (1, 2, ... in start order), as ``runs show`` numbers it."""
    task: str
    queue: str


RUN: ContextVar[RunFields | None] = ContextVar("cronbus.log_run", default=None)
"""The attempt running in this context (an asyncio task, or a thread the worker handed it)."""
SUBSCRIPTION: ContextVar[str | None] = ContextVar("cronbus.log_subscription", default=None)
"""The subscription whose pusher runs in this context."""
# Attributes of a record that the JSON object takes as they are, beside the run's fields.
_EXTRAS = ("action", "job", "worker", "event_id", "delivery")
# The run's fields under the names other modules log them with (RunLog: run_id, attempt).
_ALIASES = {"run_id": "run"}


def log_format(given: str | None, env: Mapping[str, str] | None = None) -> str:
    """The log format: ``given``, else ``CRONBUS_LOG_FORMAT``, else ``text``."""
    raw = given if given is not None else (os.environ if env is None else env).get(FORMAT_VARIABLE)
    chosen = (raw or "text").strip().lower()
    if chosen not in FORMATS:
        source = "--log-format" if given is not None else FORMAT_VARIABLE
        raise ConfigurationError(f"{source}: expected text or json, got {shorten(raw)}")
    return chosen


def current_run() -> RunFields | None:
    """The run bound to this context, if any."""
    return RUN.get()


class _Bound:
    """Sets a context variable for a block (a class, not a generator: it runs once per
    attempt, where ``contextlib.contextmanager`` costs three times as much)."""

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: ContextVar[Any], value: Any) -> None:
        self._var = var
        self._value = value
        self._token: Token[Any] | None = None

    def __enter__(self) -> None:
        self._token = self._var.set(self._value)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            self._var.reset(self._token)


def bound_run(fields: RunFields | None) -> contextlib.AbstractContextManager[None]:
    """Attach ``fields`` to the lines logged in this context until the block ends."""
    return _Bound(RUN, fields)


def bound_subscription(name: str) -> contextlib.AbstractContextManager[None]:
    """Attach the subscription ``name`` to the lines logged in this context."""
    return _Bound(SUBSCRIPTION, name)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC), level, role, logger, message, the
    run's fields and the subscription when known, ``action`` and a few other stable extras,
    and ``error`` (the traceback) for records logged with one."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname,
            "role": self.role,
            "logger": record.name,
            "message": record.getMessage(),
        }
        self._add_run(line, record)
        subscription = getattr(record, "subscription", None) or SUBSCRIPTION.get()
        if subscription is not None:
            line["subscription"] = subscription
        for name in _EXTRAS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["error"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)

    @staticmethod
    def _add_run(line: dict[str, Any], record: logging.LogRecord) -> None:
        """The run's fields: the record's own where it has them, else the context's."""
        bound = RUN.get()
        if bound is not None:
            line.update(bound._asdict())
        for name in ("run", "run_id", "attempt", "task", "queue"):
            value = getattr(record, name, None)
            if value is not None:
                line[_ALIASES.get(name, name)] = value


def _iso(created: float) -> str:
    """Epoch seconds as ISO 8601 UTC with milliseconds (``2026-12-02T01:02:03.456Z``)."""
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
