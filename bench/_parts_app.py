"""The app of ``bench/latency_parts.py``: one task that notes when its body starts, and, in the
worker process, time stamps of the steps between a defer and that start.

With ``PARTS_LOG`` set (the worker's environment), the store's wake-up hub and its
``complete_and_claim`` are wrapped to append one JSON line per event to that file: ``wake``
(a wake-up reached this process, with its channels) and ``exchange`` (a claim began, how long
it took, how many runs it claimed). Wall-clock stamps (``time.time()``): the defer side runs in
another process. Only this benchmark loads the wrappers; nothing of cronbus is changed.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from cronbus import App
from cronbus.model import ClaimedRun, ClaimRequest, Outcome
from cronbus.store.postgres.leases import PostgresLeases
from cronbus.store.sqlite.leases import SqliteLeases
from cronbus.store.wake import WakeHub

QUEUE = "parts"
app = App()
_log: TextIO | None = None


def _note(event: dict[str, Any]) -> None:
    if _log is not None:
        _log.write(json.dumps(event) + "\n")


@app.task(name="parts.stamp", queue=QUEUE)
def stamp(t0: float) -> None:
    """Note the start of this body and ``t0``, the time just before its defer call."""
    _note({"ev": "body", "t": time.time(), "t0": t0})


def _wrap_wake(original: Callable[[WakeHub, Iterable[str]], None]) -> Callable[..., None]:
    @functools.wraps(original)
    def wake_local(self: WakeHub, channels: Iterable[str]) -> None:
        channels = list(channels)
        _note({"ev": "wake", "t": time.time(), "channels": channels})
        original(self, channels)

    return wake_local


def _wrap_exchange(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def complete_and_claim(
        self: Any, outcomes: Sequence[Outcome], request: ClaimRequest, now: float
    ) -> tuple[list[bool], list[ClaimedRun]]:
        began = time.time()
        done, claimed = await original(self, outcomes, request, now)
        took = time.time() - began
        _note({"ev": "exchange", "t": began, "took": took, "claimed": len(claimed)})
        return done, claimed

    return complete_and_claim


if os.environ.get("PARTS_LOG"):
    _log = open(os.environ["PARTS_LOG"], "a", buffering=1)  # noqa: SIM115 (the process's life)
    WakeHub.wake_local = _wrap_wake(WakeHub.wake_local)  # type: ignore[method-assign]
    for leases in (SqliteLeases, PostgresLeases):
        leases.complete_and_claim = _wrap_exchange(leases.complete_and_claim)  # type: ignore[method-assign]
