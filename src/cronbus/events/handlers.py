"""The dispatcher's own threads for sync handlers (``@app.subscribe`` on a plain function).

Sync handlers used to run on asyncio's shared default executor, where one that never returns
holds a thread for good and is never told to stop. Here they run on a bounded pool of named
threads (``cronbus-handler_N``) that belongs to the dispatcher, and a push that outlives its
subscription's timeout is interrupted the way the worker interrupts thread tasks
(:mod:`cronbus.worker.interrupt`): the handler's cancel token is set at once (a handler may
wait on ``current_token()``), and if it has not returned ``POLITE_SECONDS`` later,
:class:`~cronbus.worker.interrupt.Interrupted` is raised in its thread. The push itself has
already failed as timed out by then, and other subscriptions keep their threads.

A thread stuck in C code (a blocking call that never returns) cannot be interrupted; it is
abandoned and counted, and the pool keeps as many spare threads as it has working ones, so
abandoned threads do not starve the other handlers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..worker.interrupt import CancelToken, Interrupted, interrupt_thread, using_token

log = logging.getLogger("cronbus.dispatcher")

POLITE_SECONDS = 0.5
"""How long a timed-out handler may take to notice its cancel token before it is interrupted."""
THREAD_PREFIX = "cronbus-handler"


@dataclass(slots=True)
class _Call:
    """The thread running a handler; ``thread_id`` is cleared under ``lock`` when it returns,
    so an interrupt never lands in the pool's own code after the handler ended."""

    thread_id: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class HandlerPool:
    """Runs sync handlers on ``threads`` named threads (plus as many spares for abandoned ones)."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self.abandoned = 0
        self.closed = False
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.threads * 2, thread_name_prefix=THREAD_PREFIX
        )

    async def call(self, handler: Callable[[Any], Any], value: Any, name: str) -> Any:
        """Call ``handler(value)`` in a pool thread; cancelling the caller (the push's timeout)
        cancels the handler's token, then interrupts its thread."""
        token = CancelToken()
        call = _Call()

        def target() -> Any:
            with call.lock:
                call.thread_id = threading.get_ident()
            try:
                with using_token(token):
                    return handler(value)
            finally:
                with call.lock:
                    call.thread_id = None

        future = self._pool.submit(target)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            token.cancel("timeout")
            self._abandon(future, call, name)
            raise

    def _abandon(self, future: concurrent.futures.Future[Any], call: _Call, name: str) -> None:
        if future.cancel():
            return  # it never started
        self.abandoned += 1
        loop = asyncio.get_running_loop()

        def force() -> None:
            with call.lock:
                if call.thread_id is not None and interrupt_thread(call.thread_id, Interrupted):
                    log.warning(
                        "handler of subscription %s did not stop at its timeout; interrupted "
                        "its thread",
                        name,
                        extra={"action": "handler.interrupted", "subscription": name},
                    )

        handle = loop.call_later(POLITE_SECONDS, force)

        def freed(_: concurrent.futures.Future[Any]) -> None:
            def release() -> None:
                handle.cancel()
                self.abandoned -= 1

            if not loop.is_closed():
                loop.call_soon_threadsafe(release)

        future.add_done_callback(freed)

    def shutdown(self) -> None:
        """Stop the pool without waiting for abandoned threads."""
        self.closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
