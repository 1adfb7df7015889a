"""Executing one attempt: call the task in its isolation mode, interrupt it, judge the outcome.

Interruptions (a timeout, a cancel, a lost lease, a worker shutting down) all take one path:
async tasks are cancelled, process tasks are killed, and thread tasks get their cancel token set
and an exception raised in their thread; a thread that still does not stop is abandoned, counted
as leaked, and the worker stops claiming while ``max_leaked`` such threads are alive.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..clock import Clock
from ..errors import Abort, SerializationError, UnknownTaskError
from ..model import ClaimedRun, ErrorInfo, Outcome
from ..observability import tracing
from ..observability.logs import bound_run, current_run
from ..run_context import RunContext, context_arguments
from ..serialization import dumps
from ..states import AttemptOutcome
from ..task import Task
from .capture import AttemptLog, capturing
from .interrupt import CancelToken, Interrupted, interrupt_thread, using_token
from .isolation import ProcessResult, run_in_process

TIMEOUT = "timeout"
CANCELLED = "cancelled"
LOST = "lost"
SHUTDOWN = "shutdown"
_THREAD_STOP_WAIT = 0.05
THREAD_POLITE_SECONDS = 0.5
"""How long a thread task may take to notice its cancel token before it is interrupted."""


@dataclass(slots=True)
class _ThreadCall:
    """The thread running a task; ``thread_id`` is cleared, under ``lock``, once it is done,
    so an interrupt can never land in the pool's own code after the task returned."""

    thread_id: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


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
        # Leaked threads keep their pool thread, so the pool has room for them on top.
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=concurrency + self.max_leaked, thread_name_prefix="cronbus-task"
        )

    def shutdown(self) -> None:
        """Stop the pool without waiting for leaked threads."""
        self.pool.shutdown(wait=False, cancel_futures=True)

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
        body = asyncio.ensure_future(self._body(task, claimed, log, token))
        done, _ = await asyncio.wait(
            {body, interrupt}, timeout=claimed.timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if body in done:
            return self._settle(task, claimed, body, log)
        reason = interrupt.result() if interrupt.done() else TIMEOUT
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
        args, kwargs = claimed.args, claimed.kwargs
        if task.takes_context:
            ctx = RunContext(claimed, task, token, asyncio.get_running_loop())
            args, kwargs = context_arguments(task, args, kwargs, ctx)
        if task.isolation == "async":
            with capturing(log), using_token(token):
                return await task.fn(*args, **kwargs)
        return await self._in_thread(task, args, kwargs, log, token)

    async def _in_thread(
        self,
        task: Task[Any, Any],
        args: list[Any],
        kwargs: dict[str, Any],
        log: AttemptLog,
        token: CancelToken,
    ) -> Any:
        call = _ThreadCall()
        run = current_run()  # the pool's threads do not inherit the attempt's context

        def target() -> Any:
            call.thread_id = threading.get_ident()
            try:
                with capturing(log), using_token(token), bound_run(run):
                    return task.fn(*args, **kwargs)
            finally:
                with call.lock:
                    call.thread_id = None

        future = self.pool.submit(tracing.carry(target))  # the attempt's span in the thread
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._abandon(future, call)
            raise

    def _abandon(self, future: concurrent.futures.Future[Any], call: _ThreadCall) -> None:
        """Stop waiting for a thread task; count it until its thread is free.

        The task's cancel token is already set; a task that does not stop within
        ``THREAD_POLITE_SECONDS`` gets :class:`Interrupted` raised in its thread.
        """
        if future.cancel():
            return
        self.leaked += 1
        loop = asyncio.get_running_loop()

        def force() -> None:
            with call.lock:
                if call.thread_id is not None:
                    interrupt_thread(call.thread_id, Interrupted)

        loop.call_later(THREAD_POLITE_SECONDS, force)

        def freed(_: concurrent.futures.Future[Any]) -> None:
            def release() -> None:
                self.leaked -= 1
                self._on_thread_freed()

            if not loop.is_closed():
                loop.call_soon_threadsafe(release)

        future.add_done_callback(freed)

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
