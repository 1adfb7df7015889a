"""One call in a killable child process: results, errors, logs, timeouts, cancels, deaths."""

from __future__ import annotations

import asyncio
import json
import os
import select
from pathlib import Path

import pytest

from cronbus.worker import isolation
from cronbus.worker.interrupt import CancelToken
from cronbus.worker.isolation import ProcessResult, run_in_process

TASKS = "isolation_tasks"  # tests/unit/isolation_tasks.py
SHORT = 0.5  # a timeout for calls that must be killed
LONG = 60.0  # a timeout for calls that must not be


@pytest.fixture(autouse=True)
def tasks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the task module on this process's path: the child must see it there too."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


async def run(
    qualname: str,
    *args: object,
    timeout: float | None = LONG,
    token: CancelToken | None = None,
    **kwargs: object,
) -> ProcessResult:
    return await run_in_process(
        TASKS,
        qualname,
        json.dumps(args),
        json.dumps(kwargs),
        timeout=timeout,
        token=token or CancelToken(),
    )


def assert_gone(pid: int | None) -> None:
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: no process, not even a zombie, has this pid


def spawned_children() -> list[int]:
    """Our child processes started by multiprocessing's spawn (zombies included)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # ended while we looked
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


async def test_returns_the_json_result() -> None:
    result = await run("add", 1, b=2)
    assert result == ProcessResult(ok=True, result_json="3", pid=result.pid)
    assert_gone(result.pid)


async def test_reports_an_exception_with_its_traceback() -> None:
    result = await run("fail", "boom")
    assert not result.ok
    assert (result.error_type, result.error_message) == ("ValueError", "boom")
    assert "in fail" in result.traceback
    assert result.traceback.endswith("ValueError: boom\n")
    assert result.killed is None


async def test_captures_prints_and_logs_but_not_cronbus_records() -> None:
    result = await run("chatty", "bob")
    assert result.ok
    assert result.result_json == '"BOB"'
    assert result.logs == "hello bob\nWARNING isolation_tasks: careful, bob\n"


async def test_truncates_long_output() -> None:
    result = await run("print_a_lot", 10_000)  # 11 bytes a line: 110,000 bytes
    assert result.ok
    assert len(result.logs.encode()) < 66_000
    assert result.logs.startswith("line 00000\nline 00001\n")
    assert result.logs.endswith(f"…[truncated: {110_000 - 65_536} more bytes]")


async def test_the_log_limit_can_be_set() -> None:
    result = await run_in_process(
        TASKS, "chatty", '["bob"]', "{}", timeout=LONG, token=CancelToken(), log_limit=5
    )
    assert result.logs.startswith("hello\n…[truncated: ")


async def test_kills_a_call_that_exceeds_its_timeout() -> None:
    result = await run("sleep_forever", timeout=SHORT)
    assert result.killed == "timeout"
    assert (result.ok, result.error_type) == (False, "Interrupted")
    assert "0.5 s" in result.error_message
    assert_gone(result.pid)


async def test_kills_a_call_whose_token_is_cancelled() -> None:
    token = CancelToken()
    # Runs once run_in_process waits, that is once the child has been started.
    asyncio.get_running_loop().call_soon(token.cancel, "the user asked")
    result = await run("sleep_forever", token=token)
    assert result.killed == "cancelled"
    assert "the user asked" in result.error_message
    assert_gone(result.pid)


async def test_a_token_cancelled_before_the_call_starts_no_process() -> None:
    token = CancelToken()
    token.cancel("cancelled")
    result = await run("add", 1, token=token)
    assert (result.killed, result.pid) == ("cancelled", None)


async def test_killing_takes_the_processes_the_call_started(tmp_path: Path) -> None:
    fifo = tmp_path / "grandchild.pid"
    os.mkfifo(fifo)
    token = CancelToken()
    call = asyncio.ensure_future(run("start_grandchild", str(fifo), token=token))
    grandchild = int(await asyncio.wait_for(asyncio.to_thread(fifo.read_text), LONG))
    exited = os.pidfd_open(grandchild)
    try:
        token.cancel("cancelled")
        result = await call
        readable, _, _ = await asyncio.to_thread(select.select, [exited], [], [], LONG)
    finally:
        os.close(exited)
    assert result.killed == "cancelled"
    assert readable == [exited]  # the grandchild ended too


async def test_cancelling_the_caller_kills_and_reaps_the_child() -> None:
    call = asyncio.ensure_future(run("sleep_forever"))
    running: list[int] = []
    loop = asyncio.get_running_loop()

    async def cancel_once_started() -> None:
        # The child is visible as spawn's once it exec'd: on a busy machine that is not yet
        # the case right after the call's first step, which forks it.
        deadline = loop.time() + LONG
        while not (found := spawned_children()):
            assert loop.time() < deadline, "the child never started"
            await asyncio.sleep(0.01)
        running.extend(found)
        call.cancel()

    canceller = asyncio.ensure_future(cancel_once_started())
    with pytest.raises(asyncio.CancelledError):
        await call
    await canceller
    assert len(running) == 1
    assert spawned_children() == []
    assert_gone(running[0])


async def test_a_child_that_exits_without_a_result_is_reported_with_its_output() -> None:
    result = await run("exit_abruptly", 3)
    assert (result.ok, result.error_type) == (False, "ProcessDied")
    assert "exited with code 3" in result.error_message
    assert result.logs == "about to exit\n"  # kept in shared memory, not sent: it survives
    assert result.killed is None
    assert_gone(result.pid)


async def test_a_child_killed_by_a_signal_is_reported() -> None:
    result = await run("kill_self")
    assert result.error_type == "ProcessDied"
    assert "signal SIGKILL" in result.error_message


async def test_runs_an_async_function() -> None:
    result = await run("add_later", 2, 3)
    assert (result.ok, result.result_json) == (True, "5")


async def test_a_result_that_is_not_json_is_a_serialization_error() -> None:
    result = await run("not_json")
    assert (result.ok, result.error_type) == (False, "SerializationError")
    assert "returned set" in result.error_message


async def test_calls_the_fn_of_a_task_object_and_walks_qualified_names() -> None:
    assert (await run("wrapped_add", 4, b=5)).result_json == "9"
    assert (await run("Namespace.double", 4)).result_json == "8"


async def test_an_unknown_target_is_an_error() -> None:
    result = await run_in_process(
        "no_such_module_here", "f", "[]", "{}", timeout=LONG, token=CancelToken()
    )
    assert (result.ok, result.error_type) == (False, "ModuleNotFoundError")
    assert "no_such_module_here" in result.error_message


async def test_large_arguments_do_not_need_the_pipe_buffer() -> None:
    result = await run("length", "x" * 1_000_000)
    assert result.result_json == "1000000"


async def test_a_child_lingering_after_its_result_is_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation, "EXIT_GRACE", 0.2)
    result = await run("linger", 7)
    assert (result.ok, result.result_json, result.killed) == (True, "7", None)
    assert_gone(result.pid)
