"""JSON log lines: the keys, the run and subscription bound to a context, threads, errors."""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cronbus.cli.roles import setup_logging
from cronbus.errors import ConfigurationError
from cronbus.observability.logs import (
    JsonFormatter,
    RunFields,
    bound_run,
    bound_subscription,
    current_run,
    log_format,
)


@pytest.fixture
def lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("worker"))
    logger = logging.getLogger("test.json_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def read(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_keys_and_time(lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = lines
    logger.info("hello %s", "there", extra={"action": "thing.done"})
    (line,) = read(stream)
    assert line["message"] == "hello there"
    assert line["level"] == "INFO"
    assert line["role"] == "worker"
    assert line["logger"] == "test.json_logs"
    assert line["action"] == "thing.done"
    assert len(line["time"]) == len("2026-12-02T01:02:03.456Z")
    assert line["time"].endswith("Z")
    assert "run" not in line
    assert "subscription" not in line


def test_bound_run_and_record_fields(lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = lines
    with bound_run(RunFields(7, 2, "add", "default")):
        logger.warning("inside")
        logger.warning("explicit", extra={"run": 9, "task": "other"})
    logger.warning("outside")
    logger.warning("adapter", extra={"run_id": 11, "attempt": 3})  # RunLog's names
    inside, explicit, outside, adapter = read(stream)
    assert inside | {"run": 7, "attempt": 2, "task": "add", "queue": "default"} == inside
    assert explicit["run"] == 9
    assert explicit["task"] == "other"
    assert explicit["queue"] == "default"
    assert "run" not in outside
    assert adapter["run"] == 11
    assert adapter["attempt"] == 3
    assert current_run() is None


def test_subscription_follows_asyncio_tasks(lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = lines

    async def main() -> None:
        async def push() -> None:
            logger.info("pushing")

        with bound_subscription("hook"):
            await asyncio.create_task(push())
        logger.info("after")

    asyncio.run(main())
    pushing, after = read(stream)
    assert pushing["subscription"] == "hook"
    assert "subscription" not in after


def test_threads_start_without_the_run(lines: tuple[logging.Logger, io.StringIO]) -> None:
    """A plain thread does not inherit the context (the worker hands the run over itself)."""
    logger, stream = lines
    with bound_run(RunFields(1, 1, "t", "q")):
        thread = threading.Thread(target=logger.info, args=("thread",))
        thread.start()
        thread.join()
        contextvars.copy_context().run(logger.info, "copied")
    thread_line, copied = read(stream)
    assert "run" not in thread_line
    assert copied["run"] == 1


def test_errors_carry_the_traceback(lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = lines
    try:
        raise ValueError("nope")
    except ValueError:
        logger.exception("failed")
    (line,) = read(stream)
    assert line["level"] == "ERROR"
    assert "ValueError: nope" in line["error"]


def test_log_format_choice() -> None:
    assert log_format(None, {}) == "text"
    assert log_format(None, {"CRONBUS_LOG_FORMAT": "JSON"}) == "json"
    assert log_format("text", {"CRONBUS_LOG_FORMAT": "json"}) == "text"
    with pytest.raises(ConfigurationError, match="CRONBUS_LOG_FORMAT: expected text or json"):
        log_format(None, {"CRONBUS_LOG_FORMAT": "xml"})


def test_setup_logging_json(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        setup_logging("INFO", "json", role="scheduler")
        logging.getLogger("cronbus.scheduler").info("fired", extra={"action": "jobs.fired"})
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    (line,) = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert line["role"] == "scheduler"
    assert line["action"] == "jobs.fired"
