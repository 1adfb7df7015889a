"""Executing one attempt: call the task in its isolation mode, interrupt it, judge the outcome.

Interruptions (a timeout, a cancel, a lost lease, a worker shutting down) all take one path:
async tasks are cancelled, process tasks are killed, and thread tasks get their cancel token set
and an exception raised in their thread; a thread that still does not stop is abandoned, counted
as leaked, and the worker stops claiming while ``max_leaked`` such threads are alive.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import json
import os
import random
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..clock import Clock
from ..errors import Abort, SerializationError, UnknownTaskError
from ..model import ClaimedRun, ErrorInfo, Outcome
from ..observability import tracing
from ..run_context import RunContext, context_arguments
from ..serialization import dumps
from ..states import AttemptOutcome
from ..task import Task
from .capture import CURRENT_LOG, AttemptLog
from .interrupt import CURRENT_TOKEN, CancelToken, Interrupted, interrupt_thread
from .isolation import ProcessResult, run_in_process

TIMEOUT = "timeout"
CANCELLED = "cancelled"
LOST = "lost"
SHUTDOWN = "shutdown"
_THREAD_STOP_WAIT = 0.05
THREAD_POLITE_SECONDS = 0.5
"""How long a thread task may take to notice its cancel token before it is interrupted."""


_FINISHED = "finished"
"""What an attempt's wait ends with when its body returned or raised (else: a reason)."""


class _ThreadCall:
    """One call of a sync task, handed to a slot thread.

    ``thread_id`` is set while the task runs and cleared, under ``lock``, once it is done, so
    an interrupt can never land in the slot thread's own code after the task returned. A call
    dropped before a thread took it never runs; one abandoned while it runs is ``leaked`` until
    its thread is free again.
    """

    __slots__ = (
        "args",
        "context",
        "dropped",
        "ended",
        "error",
        "executor",
        "fn",
        "kwargs",
        "leaked",
        "lock",
        "log",
        "loop",
        "thread_id",
        "token",
        "value",
        "waiter",
    )

    def __init__(
        self,
        executor: Executor,
        fn: Callable[..., Any],
        args: list[Any],
        kwargs: dict[str, Any],
        log: AttemptLog,
        token: CancelToken,
        waiter: asyncio.Future[str],
    ) -> None:
        self.executor = executor
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.log = log
        self.token = token
        # The attempt's context (its log fields, its span) goes with it to the slot thread.
        self.context = contextvars.copy_context()
        self.waiter = waiter
        self.loop = waiter.get_loop()
        self.lock = threading.Lock()
        self.thread_id: int | None = None
        self.dropped = False
        self.ended = False
        self.leaked = False
        self.value: Any = None
        self.error: BaseException | None = None

    def execute(self) -> None:
        """Run the task in this (slot) thread, in a copy of its attempt's context; tell the loop."""
        with self.lock:
            if self.dropped:
                return
            self.thread_id = threading.get_ident()
        try:
            try:
                self.context.run(self._call)
            finally:
                self._end()
        except BaseException as exc:  # an Interrupted that landed just after the task
            if self.error is None:
                self.error = exc
            self._end()  # no second one can come: one is raised per abandoned call at most
        self.executor._thread_done(self)

    def _end(self) -> None:
        with self.lock:
            self.thread_id = None
            self.ended = True

    def _call(self) -> None:
        CURRENT_LOG.set(self.log)
        CURRENT_TOKEN.set(self.token)
        try:
            self.value = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:
            self.error = exc


class _SlotThreads:
    """Long-lived threads that run sync tasks, each taking the next call from one queue.

    A call costs a deque append and, when a thread is idle, one byte written to that thread's
    pipe. The byte is written with the GIL released (``os.write``), where a lock or a
    ``SimpleQueue`` wakes the thread while holding it: on a busy machine the kernel then often
    switches to the woken thread, which can only wait for the GIL its waker holds, and the
    waker waits for a CPU (``ThreadPoolExecutor.submit`` was a sixth of the worker's GIL time).
    Threads start when a call finds none idle, up to ``limit``; they are daemons, so a thread
    stuck in C code never holds up the process's exit (its run was queued again).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._calls: collections.deque[_ThreadCall | None] = collections.deque()
        self._lock = threading.Lock()
        self._idle: list[int] = []
        """The write ends of the pipes of threads waiting for a call."""
        self._threads = 0
        self._closed = False

    def submit(self, call: _ThreadCall) -> None:
        if self._closed:
            raise RuntimeError("the worker's task threads are shut down")
        self._calls.append(call)
        self._wake_one()

    def _wake_one(self) -> None:
        with self._lock:
            if self._idle:
                wake: int | None = self._idle.pop()
                start = False
            else:
                wake = None
                start = self._threads < self._limit and not self._closed
                if start:
                    self._threads += 1
            number = self._threads
        if wake is not None:
            os.write(wake, b"\0")
        elif start:
            thread = threading.Thread(
                target=self._serve, name=f"cronbus-task_{number - 1}", daemon=True
            )
            thread.start()

    def _serve(self) -> None:
        calls, lock, idle = self._calls, self._lock, self._idle
        read, write = os.pipe()
        try:
            while True:
                try:
                    call = calls.popleft()
                except IndexError:
                    with lock:
                        if calls:
                            continue  # a call came between the two looks
                        idle.append(write)
                    os.read(read, 1)  # the GIL is free while this thread waits
                    continue
                if call is None:
                    return
                call.execute()
                del call
        finally:
            with lock:
                self._threads -= 1
                if write in idle:
                    idle.remove(write)
            os.close(read)
            os.close(write)

    def shutdown(self) -> None:
        """Let every thread end once it is free (idle ones at once)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._calls.append(None)
            self._wake_one()


class RemoteError(Exception):
    """An exception raised in a child process, known here by its type name only."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


class Executor:
    """Runs attempts of an app's tasks; owns the thread pool of sync tasks."""

    def __init__(
        self,
        tasks: dict[str, Task[Any, Any]],
        *,
        clock: Clock,
        concurrency: int,
        log_limit: int,
        on_thread_freed: Callable[[], None] = lambda: None,
    ) -> None:
        self.tasks = tasks
        self.clock = clock
        self.log_limit = log_limit
        self.max_leaked = concurrency
        self.leaked = 0
        self._on_thread_freed = on_thread_freed
        # Leaked threads keep their slot thread, so there is room for them on top.
        self._threads = _SlotThreads(concurrency + self.max_leaked)
        self._done_lock = threading.Lock()
        self._done: list[_ThreadCall] = []

    def shutdown(self) -> None:
        """Stop the task threads without waiting for leaked ones."""
        self._threads.shutdown()

    async def run(self, claimed: ClaimedRun, interrupt: asyncio.Future[str]) -> Outcome | None:
        """Execute one attempt; None when the lease was lost (the outcome is not ours to tell)."""
        with tracing.attempt(claimed) as span:  # current while the task runs
            outcome = await self._run(claimed, interrupt)
            span.ended(outcome)
        return outcome

    async def _run(self, claimed: ClaimedRun, interrupt: asyncio.Future[str]) -> Outcome | None:
        task = self.tasks.get(claimed.task)
        if task is None:
            error = UnknownTaskError(f"this worker has no task named {claimed.task!r}")
            return self._failed(claimed, AttemptOutcome.FAILED, _info(error), "", None)
        log = AttemptLog(self.log_limit)
        token = CancelToken()
        if task.isolation == "thread":
            return await self._run_thread(task, claimed, interrupt, log, token)
        body = asyncio.ensure_future(self._body(task, claimed, log, token))
        waiter = asyncio.get_running_loop().create_future()
        body.add_done_callback(functools.partial(_body_ended, waiter))
        reason = await _until(waiter, interrupt, claimed.timeout)
        if body.done():
            return self._settle(task, claimed, body, log)
        token.cancel(reason)
        await self._stop(task, body)
        logs = log.getvalue()
        if body.done() and not body.cancelled() and body.exception() is None:
            result = body.result()
            if isinstance(result, ProcessResult):  # a killed child's output up to the kill
                logs = result.logs
        return self._interrupted(task, claimed, reason, logs)

    async def _body(
        self, task: Task[Any, Any], claimed: ClaimedRun, log: AttemptLog, token: CancelToken
    ) -> Any:
        if task.isolation == "process":
            return await run_in_process(
                task.fn.__module__,
                task.fn.__qualname__,
                claimed.args_json,
                claimed.kwargs_json,
                timeout=None,
                token=token,
                log_limit=self.log_limit,
            )
        args, kwargs = _arguments(task, claimed, token)
        # The body's own task: its context is a copy that ends with it, so no reset is needed.
        CURRENT_LOG.set(log)
        CURRENT_TOKEN.set(token)
        return await task.fn(*args, **kwargs)

    # -- thread tasks --------------------------------------------------------------------------
    async def _run_thread(
        self,
        task: Task[Any, Any],
        claimed: ClaimedRun,
        interrupt: asyncio.Future[str],
        log: AttemptLog,
        token: CancelToken,
    ) -> Outcome | None:
        """A sync task on a slot thread: one queue hand-off there, one batched wake-up back."""
        try:
            args, kwargs = _arguments(task, claimed, token)
        except Exception as exc:  # arguments the store gave that are not JSON
            return self._failed(claimed, AttemptOutcome.FAILED, _info(exc), "", task, exc)
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        call = _ThreadCall(self, task.fn, args, kwargs, log, token, waiter)
        self._threads.submit(call)
        reason = await _until(waiter, interrupt, claimed.timeout)
        if call.ended:
            error = call.error
            if error is not None:
                return self._failed(
                    claimed, AttemptOutcome.FAILED, _info(error), log.getvalue(), task, error
                )
            return self._succeeded(claimed, call.value, log.getvalue(), task)
        token.cancel(reason)
        self._abandon(call)
        return self._interrupted(task, claimed, reason, log.getvalue())

    def _thread_done(self, call: _ThreadCall) -> None:
        """In a slot thread: a call ended. Calls that end together share one wake-up of the
        loop (one write to its self-pipe)."""
        with self._done_lock:
            self._done.append(call)
            first = len(self._done) == 1
        if first:
            try:
                call.loop.call_soon_threadsafe(self._wake_waiters)
            except RuntimeError:  # the loop is closed: nobody waits any more
                with self._done_lock:
                    self._done.clear()

    def _wake_waiters(self) -> None:
        with self._done_lock:
            done, self._done = self._done, []
        for call in done:
            if not call.waiter.done():
                call.waiter.set_result(_FINISHED)
            if call.leaked:
                self.leaked -= 1
                self._on_thread_freed()

    def _abandon(self, call: _ThreadCall) -> None:
        """Stop waiting for a thread task; count it until its thread is free.

        The task's cancel token is already set; a task that does not stop within
        ``THREAD_POLITE_SECONDS`` gets :class:`Interrupted` raised in its thread. A call no
        thread took yet never runs.
        """
        with call.lock:
            if call.ended:
                return
            if call.thread_id is None:
                call.dropped = True
                return
            call.leaked = True
        self.leaked += 1

        def force() -> None:
            with call.lock:
                if call.thread_id is not None:
                    interrupt_thread(call.thread_id, Interrupted)

        call.loop.call_later(THREAD_POLITE_SECONDS, force)

    async def _stop(self, task: Task[Any, Any], body: asyncio.Future[Any]) -> None:
        if task.isolation == "process":
            # The token kills the child; the body returns as soon as it is reaped.
            await asyncio.wait({body})
            return
        body.cancel()
        await asyncio.wait({body}, timeout=_THREAD_STOP_WAIT)

    # -- outcomes ------------------------------------------------------------------------------
    def _settle(
        self, task: Task[Any, Any], claimed: ClaimedRun, body: asyncio.Future[Any], log: AttemptLog
    ) -> Outcome:
        error = body.exception()
        if error is not None:
            return self._failed(
                claimed, AttemptOutcome.FAILED, _info(error), log.getvalue(), task, error
            )
        value = body.result()
        if isinstance(value, ProcessResult):
            return self._from_process(task, claimed, value)
        return self._succeeded(claimed, value, log.getvalue(), task)

    def _succeeded(
        self, claimed: ClaimedRun, value: Any, logs: str, task: Task[Any, Any]
    ) -> Outcome:
        try:
            result_json = dumps(value)
        except (TypeError, ValueError):
            error = SerializationError(
                f"task {claimed.task!r} returned {type(value).__name__}, which is not JSON"
            )
            return self._failed(claimed, AttemptOutcome.FAILED, _info(error), logs, None)
        return Outcome(
            run_id=claimed.run_id,
            attempt_id=claimed.attempt_id,
            fence=claimed.fence,
            outcome=AttemptOutcome.SUCCEEDED,
            result_json=result_json,
            logs=logs,
        )

    def _from_process(
        self, task: Task[Any, Any], claimed: ClaimedRun, result: ProcessResult
    ) -> Outcome:
        if result.ok:
            return Outcome(
                run_id=claimed.run_id,
                attempt_id=claimed.attempt_id,
                fence=claimed.fence,
                outcome=AttemptOutcome.SUCCEEDED,
                result_json=result.result_json,
                logs=result.logs,
            )
        info = ErrorInfo(
            type=result.error_type, message=result.error_message, traceback=result.traceback
        )
        error: BaseException = RemoteError(result.error_type, result.error_message)
        if result.error_type.rsplit(".", 1)[-1] in ("Abort", "SerializationError"):
            error = Abort(result.error_message)
        return self._failed(claimed, AttemptOutcome.FAILED, info, result.logs, task, error)

    def _interrupted(
        self, task: Task[Any, Any], claimed: ClaimedRun, reason: str, logs: str
    ) -> Outcome | None:
        if reason == LOST:
            return None
        if reason == SHUTDOWN:
            info = ErrorInfo(
                type="WorkerShutdown",
                message="the worker stopped before the attempt ended; the run is queued again",
            )
            return Outcome(
                run_id=claimed.run_id,
                attempt_id=claimed.attempt_id,
                fence=claimed.fence,
                outcome=AttemptOutcome.LOST,
                error=info,
                logs=logs,
                counts=False,
            )
        if reason == CANCELLED:
            info = ErrorInfo(type="Cancelled", message="the run was cancelled while running")
            return self._failed(claimed, AttemptOutcome.CANCELLED, info, logs, None)
        error = TimeoutError(f"the attempt exceeded its timeout of {claimed.timeout:g} s")
        return self._failed(claimed, AttemptOutcome.TIMED_OUT, _info(error), logs, task, error)

    def _failed(
        self,
        claimed: ClaimedRun,
        outcome: AttemptOutcome,
        info: ErrorInfo,
        logs: str,
        task: Task[Any, Any] | None,
        error: BaseException | None = None,
    ) -> Outcome:
        retry_at = None
        if task is not None and error is not None and claimed.attempt < claimed.max_attempts:
            retry_at = task.retry.next_eta(
                error, claimed.attempt, self.clock.now(), random.random()
            )
        return Outcome(
            run_id=claimed.run_id,
            attempt_id=claimed.attempt_id,
            fence=claimed.fence,
            outcome=outcome,
            error=info,
            logs=logs,
            retry_at=retry_at,
        )


def _body_ended(waiter: asyncio.Future[str], _: object) -> None:
    if not waiter.done():
        waiter.set_result(_FINISHED)


def _decoded(text: str) -> Any:
    """Arguments as stored: the empty forms without a parse."""
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return json.loads(text)


def _arguments(
    task: Task[Any, Any], claimed: ClaimedRun, token: CancelToken
) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments, decoded once, with the run context where the task takes it."""
    args, kwargs = _decoded(claimed.args_json), _decoded(claimed.kwargs_json)
    if task.takes_context:
        ctx = RunContext(claimed, task, token, asyncio.get_running_loop())
        args, kwargs = context_arguments(task, args, kwargs, ctx)
    return args, kwargs


async def _until(
    waiter: asyncio.Future[str], interrupt: asyncio.Future[str], timeout: float | None
) -> str:
    """Wait for ``waiter`` (set to :data:`_FINISHED` when the body ended), an interrupt, or the
    timeout; return what ended the wait (``_FINISHED``, the interrupt's reason, ``TIMEOUT``).

    Callbacks and one timer handle, where ``asyncio.wait`` made a task set, a future and
    callbacks on each awaited future per call.
    """

    def interrupted(_: asyncio.Future[str]) -> None:
        if not waiter.done():
            waiter.set_result(interrupt.result())

    def timed_out() -> None:
        if not waiter.done():
            waiter.set_result(TIMEOUT)

    if interrupt.done():
        interrupted(interrupt)
    else:
        interrupt.add_done_callback(interrupted)
    timer = None if timeout is None else waiter.get_loop().call_later(timeout, timed_out)
    try:
        return await waiter
    finally:
        interrupt.remove_done_callback(interrupted)
        if timer is not None:
            timer.cancel()


def _info(error: BaseException) -> ErrorInfo:
    kind = type(error)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    return ErrorInfo(
        type=name,
        message=str(error),
        traceback="".join(traceback.format_exception(error)),
    )
