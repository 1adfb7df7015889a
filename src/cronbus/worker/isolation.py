"""Running one call in a child process, so that a timeout or a cancel can kill it.

The child is started with multiprocessing's *spawn* method, never *fork*: the worker has threads
and an event loop, and a forked copy of them (with locks held by threads that do not exist in
the child) can deadlock. As with any spawned process, the worker's ``__main__`` module is
imported again in the child under the name ``__mp_main__``, so a script that starts a worker
must guard it with ``if __name__ == "__main__":``.

How the parent and the child talk:

* a socket pair (what ``multiprocessing.Pipe`` is on POSIX) carries the arguments to the child
  and its outcome back, framed as 8-byte lengths and JSON; the parent uses the event loop's
  socket calls, so waiting holds neither the loop nor a thread;
* the child's prints and log records are kept in shared memory (a :class:`~.capture.AttemptLog`
  mirrored into a ``RawArray``), so they survive the child being killed or dying;
* the child leads its own process group, so killing it also kills what it started (a shell
  command, a pool of processes).

The ``timeout`` counts from the call, child start-up (100-200 ms) included.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import inspect
import json
import logging
import multiprocessing
import os
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from ..serialization import dumps
from . import capture
from .interrupt import CancelToken

__all__ = ["ProcessResult", "run_in_process"]

EXIT_GRACE = 2.0
"""Seconds a child may take to exit after it sent its outcome (or closed its socket)."""

_HEADER = struct.Struct("!Q")


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessResult:
    """What became of one call in a child process.

    ``ok`` with ``result_json``, or an error: ``error_type`` is the exception's class
    (``module.QualName``, or the bare name for builtins), ``"SerializationError"`` for a result
    that is not JSON, ``"ProcessDied"`` for a child that ended without an outcome, and
    ``"Interrupted"`` when ``killed`` says why it was killed (``"timeout"`` or ``"cancelled"``).
    ``logs`` holds what the call printed and logged, even when it was killed.
    """

    ok: bool
    result_json: str | None = None
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    logs: str = ""
    killed: Literal["timeout", "cancelled"] | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class _ChildSpec:
    module: str
    qualname: str
    sys_path: tuple[str, ...]
    root_level: int


@dataclass(frozen=True, slots=True)
class _Killed:
    why: Literal["timeout", "cancelled"]


# What the supervision saw: the child's message, a kill, or nothing (the child died).
_Outcome = dict[str, Any] | _Killed | None


async def run_in_process(
    module: str,
    qualname: str,
    args_json: str,
    kwargs_json: str,
    *,
    timeout: float | None,
    token: CancelToken,
    log_limit: int = capture.DEFAULT_LIMIT,
) -> ProcessResult:
    """Call ``module.qualname(*args, **kwargs)`` in a child process and return its outcome.

    ``args_json`` is a JSON array and ``kwargs_json`` a JSON object. When the object found has an
    ``fn`` attribute (a cronbus ``Task``), ``obj.fn`` is called; a coroutine it returns is run
    with ``asyncio.run``. The child is killed when ``timeout`` seconds pass or ``token`` is
    cancelled, and is always reaped before this returns. Cancelling this coroutine kills the
    child too. The first ``log_limit`` bytes of its output are kept, as by an ``AttemptLog``.
    """
    if log_limit < 0:
        raise ValueError(f"log_limit must be 0 or more bytes, got {log_limit}")
    if token.cancelled:
        return _killed_result(_Killed("cancelled"), token, timeout, logs="", pid=None)
    context = multiprocessing.get_context("spawn")
    log_data = context.RawArray(ctypes.c_char, log_limit)
    log_counts = context.RawArray(ctypes.c_int64, 2)
    spec = _ChildSpec(module, qualname, tuple(sys.path), logging.getLogger().level)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)  # the event loop's socket calls require it
    process = context.Process(
        target=_child_main,
        args=(theirs, spec, log_data, log_counts),
        name=f"cronbus {module}:{qualname}",
    )
    try:
        # The parent's copy of the child's end must go: otherwise the child's death would never
        # read as end-of-file on ours.
        with theirs:
            process.start()
        outcome = await _supervise(process, ours, args_json, kwargs_json, timeout, token)
    finally:
        ours.close()
        pid, exitcode = _reap(process)
    logs = _read_logs(log_data, log_counts)
    if isinstance(outcome, _Killed):
        return _killed_result(outcome, token, timeout, logs=logs, pid=pid)
    if outcome is None:
        return _died_result(exitcode, logs=logs, pid=pid)
    return _message_result(outcome, logs=logs, pid=pid)


# -- the parent ------------------------------------------------------------------------------


async def _supervise(
    process: BaseProcess,
    sock: socket.socket,
    args_json: str,
    kwargs_json: str,
    timeout: float | None,
    token: CancelToken,
) -> _Outcome:
    """Wait for the child's outcome, its exit, a cancel or the timeout, whichever comes first."""
    loop = asyncio.get_running_loop()
    exited = _ExitWatch(loop, process)
    cancelled: asyncio.Future[None] = loop.create_future()
    remove = token.on_cancel(lambda _: _resolve_threadsafe(loop, cancelled))
    exchange = asyncio.ensure_future(_exchange(sock, args_json, kwargs_json))
    try:
        waiting: set[asyncio.Future[Any]] = {exchange, exited.future, cancelled}
        done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if exchange in done:
            outcome: _Outcome = exchange.result()
        elif exited.future in done:
            # Whatever the child sent before exiting is buffered in our socket by now; a bound
            # still, in case a grandchild keeps the child's end open without writing.
            outcome = await _result_within(exchange, EXIT_GRACE)
        else:
            outcome = _Killed("cancelled" if cancelled in done else "timeout")
        if isinstance(outcome, _Killed) or not await _done_within(exited.future, EXIT_GRACE):
            # A child that lingers after its outcome (a non-daemon thread, say) is killed too.
            _kill(process)
            await exited.future
        await _stop(exchange)
        return outcome
    finally:
        remove()
        exchange.cancel()
        # When we are cancelled, the exchange may still be registered for the socket, which the
        # caller closes at once: unregister now, or a later registration of the same file
        # descriptor number could be removed in its place.
        loop.remove_reader(sock.fileno())
        loop.remove_writer(sock.fileno())
        exited.close()
        cancelled.cancel()


async def _exchange(sock: socket.socket, args_json: str, kwargs_json: str) -> dict[str, Any] | None:
    """Send the arguments, receive the outcome; None when the child went away first."""
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_sendall(sock, _frame(args_json.encode()) + _frame(kwargs_json.encode()))
        (size,) = _HEADER.unpack(await _receive(loop, sock, _HEADER.size))
        message = json.loads(await _receive(loop, sock, size))
    except (EOFError, ConnectionError):
        return None
    if not isinstance(message, dict):
        raise TypeError(f"the child sent {type(message).__name__}, not an outcome")
    return message


async def _receive(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = await loop.sock_recv_into(sock, view[received:])
        if count == 0:
            raise EOFError
        received += count
    return bytes(buffer)


class _ExitWatch:
    """A future completed when the child exits, watched by the event loop (no thread).

    A pidfd (Linux 5.3+) tells exactly when the process ends; the multiprocessing sentinel, the
    fallback, is a pipe that a grandchild may have inherited.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, process: BaseProcess) -> None:
        self._loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self._owned = True
        try:
            assert process.pid is not None
            self._fd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            self._fd, self._owned = process.sentinel, False
        loop.add_reader(self._fd, _resolve, self.future)

    def close(self) -> None:
        self._loop.remove_reader(self._fd)
        if self._owned:
            os.close(self._fd)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _resolve_threadsafe(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    # The token may be cancelled from any thread, even once this loop is closed.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_resolve, future)


async def _done_within(future: asyncio.Future[None], seconds: float) -> bool:
    done, _ = await asyncio.wait({future}, timeout=seconds)
    return bool(done)


async def _result_within(
    task: asyncio.Future[dict[str, Any] | None], seconds: float
) -> dict[str, Any] | None:
    done, _ = await asyncio.wait({task}, timeout=seconds)
    return task.result() if done else None


async def _stop(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it is over, without raising what it raised."""
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # retrieved: asyncio would otherwise log it as never retrieved


def _kill(process: BaseProcess) -> None:
    # The group first, so what the child started dies with it. Before the child has made its
    # group (right after start) there is no such group, and killing the child alone suffices.
    assert process.pid is not None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.kill()


def _reap(process: BaseProcess) -> tuple[int | None, int | None]:
    """Kill the child if it still runs, wait for it, free its resources: (pid, exit code)."""
    pid = process.pid
    if pid is None:
        return None, None  # never started
    if process.exitcode is None:
        _kill(process)  # only when the caller cancelled us: the normal paths have reaped it
    process.join()  # returns at once or within milliseconds of SIGKILL, so it may block here
    exitcode = process.exitcode
    process.close()
    return pid, exitcode


def _read_logs(data: ctypes.Array[ctypes.c_char], counts: ctypes.Array[ctypes.c_int64]) -> str:
    kept, dropped = int(counts[0]), int(counts[1])
    return capture.render_log(data.raw[:kept].decode("utf-8", "replace"), dropped)


def _killed_result(
    outcome: _Killed, token: CancelToken, timeout: float | None, *, logs: str, pid: int | None
) -> ProcessResult:
    if outcome.why == "timeout":
        message = f"the call did not end within {timeout:g} s; its process was killed"
    else:
        message = f"the call was cancelled ({token.reason}); its process was killed"
    return ProcessResult(
        ok=False,
        error_type="Interrupted",
        error_message=message,
        logs=logs,
        killed=outcome.why,
        pid=pid,
    )


def _died_result(exitcode: int | None, *, logs: str, pid: int | None) -> ProcessResult:
    if exitcode is not None and exitcode < 0:
        how = f"was killed by signal {_signal_name(-exitcode)} (exit code {exitcode})"
    else:
        how = f"exited with code {exitcode}"
    return ProcessResult(
        ok=False,
        error_type="ProcessDied",
        error_message=f"the child process {how} before sending a result",
        logs=logs,
        pid=pid,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _message_result(message: dict[str, Any], *, logs: str, pid: int | None) -> ProcessResult:
    if message.get("ok") is True:
        return ProcessResult(ok=True, result_json=str(message["result_json"]), logs=logs, pid=pid)
    return ProcessResult(
        ok=False,
        error_type=str(message.get("error_type", "Exception")),
        error_message=str(message.get("error_message", "")),
        traceback=str(message.get("traceback", "")),
        logs=logs,
        pid=pid,
    )


def _frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload)) + payload


# -- the child -------------------------------------------------------------------------------


class _SharedLog(capture.AttemptLog):
    """An attempt log mirrored into shared memory, which the parent reads after the child ends.

    ``counts`` is (kept bytes, dropped bytes), updated after the bytes they cover, so a child
    killed mid-write leaves a consistent prefix.
    """

    def __init__(
        self, data: ctypes.Array[ctypes.c_char], counts: ctypes.Array[ctypes.c_int64]
    ) -> None:
        super().__init__(len(data))
        self._data = data
        self._counts = counts

    def _appended(self, data: bytes) -> None:
        end = self.kept_bytes
        if data:  # AttemptLog keeps end <= limit == len(self._data)
            ctypes.memmove(ctypes.addressof(self._data) + end - len(data), data, len(data))
        self._counts[1] = self.dropped_bytes
        self._counts[0] = end


def _child_main(
    sock: socket.socket,
    spec: _ChildSpec,
    log_data: ctypes.Array[ctypes.c_char],
    log_counts: ctypes.Array[ctypes.c_int64],
) -> None:
    """The child's entry point: receive the arguments, call, send the outcome."""
    with contextlib.suppress(OSError):
        os.setsid()  # its own process group, killed as one (see _kill)
    # Spawn already copies the parent's path; prepending it again keeps modules importable in
    # the parent importable here whatever the start method does.
    sys.path[:0] = [entry for entry in spec.sys_path if entry not in sys.path]
    # The child's logging is unconfigured: take the worker's root level, so a task's records
    # are kept or dropped as they would be in a thread.
    logging.getLogger().setLevel(spec.root_level)
    capture.install()
    log = _SharedLog(log_data, log_counts)
    with sock:
        args_json, kwargs_json = _receive_frame(sock), _receive_frame(sock)
        with capture.capturing(log):
            message = _call(spec, args_json, kwargs_json)
        sock.sendall(_frame(json.dumps(message).encode()))


def _receive_frame(sock: socket.socket) -> str:
    (size,) = _HEADER.unpack(_receive_blocking(sock, _HEADER.size))
    return _receive_blocking(sock, size).decode()


def _receive_blocking(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = sock.recv_into(view[received:])
        if count == 0:
            raise EOFError("the worker closed the connection")
        received += count
    return bytes(buffer)


def _call(spec: _ChildSpec, args_json: str, kwargs_json: str) -> dict[str, Any]:
    try:
        target = _resolve_target(spec.module, spec.qualname)
        args, kwargs = _decode_arguments(args_json, kwargs_json)
        result = target(*args, **kwargs)
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
    except BaseException as exc:  # this process exists for this call: report even SystemExit
        return _error_message(exc)
    try:
        return {"ok": True, "result_json": dumps(result)}
    except (TypeError, ValueError) as exc:
        return {
            "ok": False,
            "error_type": "SerializationError",
            "error_message": (
                f"{spec.module}:{spec.qualname} returned {type(result).__qualname__}, "
                f"which is not JSON ({exc})"
            ),
            "traceback": "",
        }


def _resolve_target(module: str, qualname: str) -> Callable[..., Any]:
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    # A cronbus Task wraps the user's function; calling the function skips the Task's own
    # __call__ logic, which belongs to the worker.
    target = getattr(found, "fn", found)
    if not callable(target):
        raise TypeError(f"{module}:{qualname} is not callable")
    return target  # type: ignore[no-any-return]


def _decode_arguments(args_json: str, kwargs_json: str) -> tuple[list[Any], dict[str, Any]]:
    args, kwargs = json.loads(args_json), json.loads(kwargs_json)
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TypeError("arguments must be a JSON array and keyword arguments a JSON object")
    return args, kwargs


def _error_message(exc: BaseException) -> dict[str, Any]:
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    return {
        "ok": False,
        "error_type": name,
        "error_message": _safe_str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} whose str() failed>"
