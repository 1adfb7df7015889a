"""Capture of an attempt's prints and log records: bounded, and kept apart per attempt."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sys
import threading
from collections.abc import Iterator

import pytest

from cronbus.worker.capture import (
    AttemptLog,
    capturing,
    current_log,
    install,
    render_log,
    uninstall,
)

logger = logging.getLogger("capture_test")


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Capture installed for the block.

    Inside the test body, not in a fixture: pytest puts its own ``sys.stdout`` back between
    fixture setup and the test call, which would remove the proxy.
    """
    install()
    try:
        yield
    finally:
        uninstall()


def emit(name: str) -> None:
    print(f"print {name}")
    logger.warning("log %s", name)


def expected(name: str) -> str:
    return f"print {name}\nWARNING capture_test: log {name}\n"


def test_concurrent_thread_attempts_keep_their_own_output() -> None:
    logs = {"a": AttemptLog(), "b": AttemptLog()}
    both_inside = threading.Barrier(2, timeout=10)

    def attempt(name: str) -> None:
        with capturing(logs[name]):
            both_inside.wait()  # both attempts are current at once, in their own threads
            emit(name)
            both_inside.wait()

    threads = [threading.Thread(target=attempt, args=(name,)) for name in logs]
    with installed():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert {name: log.getvalue() for name, log in logs.items()} == {
        name: expected(name) for name in logs
    }


async def test_concurrent_asyncio_attempts_keep_their_own_output() -> None:
    logs = {"a": AttemptLog(), "b": AttemptLog()}
    both_inside = asyncio.Barrier(2)

    async def attempt(name: str) -> None:
        with capturing(logs[name]):
            await both_inside.wait()
            emit(name)
            # The context follows the attempt into worker threads, as the engine runs them.
            await asyncio.to_thread(emit, f"{name} in to_thread")
            context = contextvars.copy_context()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, context.run, emit, f"{name} in executor")

    with installed():
        await asyncio.gather(*(attempt(name) for name in logs))
    for name, log in logs.items():
        assert log.getvalue() == (
            expected(name) + expected(f"{name} in to_thread") + expected(f"{name} in executor")
        )


def test_nothing_is_captured_without_a_current_attempt(capsys: pytest.CaptureFixture[str]) -> None:
    unused = AttemptLog()
    with installed():
        print("to the real stdout")
        logger.warning("to the worker's handlers only")
        assert current_log() is None
    assert unused.getvalue() == ""
    assert capsys.readouterr().out == "to the real stdout\n"


def test_output_returns_to_the_real_stdout_after_the_attempt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = AttemptLog()
    with installed():
        with capturing(log):
            print("captured")
            assert current_log() is log
        print("not captured")
    assert log.getvalue() == "captured\n"
    assert capsys.readouterr().out == "not captured\n"


def test_cronbus_records_are_not_captured() -> None:
    log = AttemptLog()
    with installed(), capturing(log):
        logging.getLogger("cronbus.worker").warning("the worker's own record")
        logging.getLogger("cronbusy").warning("a user's logger")
    assert log.getvalue() == "WARNING cronbusy: a user's logger\n"


def test_the_task_logger_level_decides_and_the_root_level_is_untouched() -> None:
    root_level = logging.getLogger().level
    task_logger = logging.getLogger("capture_test.verbose")
    task_logger.setLevel(logging.INFO)
    log = AttemptLog()
    try:
        with installed(), capturing(log):
            task_logger.info("kept")
            task_logger.debug("below the task's level")
            assert logging.getLogger().level == root_level
    finally:
        task_logger.setLevel(logging.NOTSET)
    assert log.getvalue() == "INFO capture_test.verbose: kept\n"


def test_exceptions_are_formatted_into_the_log() -> None:
    log = AttemptLog()
    with installed(), capturing(log):
        try:
            raise KeyError("missing")
        except KeyError:
            logger.exception("lookup failed")
    assert log.getvalue().startswith("ERROR capture_test: lookup failed\nTraceback")
    assert "KeyError: 'missing'" in log.getvalue()


def test_truncation_keeps_the_head_and_counts_dropped_bytes() -> None:
    log = AttemptLog(10)
    log.write("abcdef")
    log.write("ghijkl")  # 4 of these 6 bytes fit
    log.write("mn")  # after a drop nothing more is kept, even what would fit
    assert log.getvalue() == "abcdefghij\n…[truncated: 4 more bytes]"
    assert (log.kept_bytes, log.dropped_bytes) == (10, 4)


def test_truncation_cuts_at_a_character_boundary_and_counts_bytes() -> None:
    log = AttemptLog(5)
    log.write("aé€\n")  # 1 + 2 + 3 + 1 bytes: "€" would be cut in the middle, so it goes
    assert log.getvalue() == "aé\n…[truncated: 4 more bytes]"


def test_a_log_within_its_limit_has_no_marker() -> None:
    log = AttemptLog(6)
    assert log.write("abc\n") == 4
    assert log.getvalue() == "abc\n"
    assert render_log("", 0) == ""
    assert render_log("", 3) == "…[truncated: 3 more bytes]"


def test_writes_from_many_threads_are_all_counted() -> None:
    log = AttemptLog(1000)
    line = "x" * 9 + "\n"

    def write_many() -> None:
        for _ in range(100):
            log.write(line)

    threads = [threading.Thread(target=write_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert (log.kept_bytes, log.dropped_bytes) == (1000, 3000)
    assert log.getvalue() == line * 100 + "…[truncated: 3000 more bytes]"


def test_uninstall_restores_stdout_and_the_root_logger() -> None:
    original = sys.stdout
    handlers = list(logging.getLogger().handlers)
    install()
    install()  # nested: reference counted
    try:
        assert sys.stdout is not original
        uninstall()
        assert sys.stdout is not original  # one install is still active
    finally:
        uninstall()
    assert sys.stdout is original
    assert logging.getLogger().handlers == handlers
    uninstall()  # more uninstalls than installs: nothing happens
    assert sys.stdout is original


def test_the_proxy_looks_like_the_original_stream(capsys: pytest.CaptureFixture[str]) -> None:
    original = sys.stdout
    install()
    try:
        proxy = sys.stdout
        assert proxy.encoding == original.encoding
        assert proxy.isatty() == original.isatty()
        with capturing(AttemptLog()):
            assert not proxy.isatty()  # output goes to a buffer, not a terminal
        proxy.writelines(["a", "b\n"])
        proxy.flush()
    finally:
        uninstall()
    assert capsys.readouterr().out == "ab\n"


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        AttemptLog(-1)
