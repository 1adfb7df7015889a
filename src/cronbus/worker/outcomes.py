"""Run outcomes as events: ``run.succeeded``, ``run.failed``, ``run.timed_out`` and ``run.dead``
on the system topic ``cronbus.runs``, for alerts and for chaining one task to another.

They are published while at least one subscription reads that topic (looked up every few
seconds), so a worker pays nothing for them otherwise. Each event's id is derived from the
attempt and its claim's fence, so publishing one twice stores it once, while an attempt id that
a crash handed out again (see :mod:`cronbus.store.fencing`) still gets events of its own.

Outcomes of runs of a namespace other than ``default`` go to ``cronbus.runs.<namespace>``
(:func:`runs_topic`): a topic belongs to one namespace, and one tenant's outcomes are not
another's to read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..events.records import NewEvent
from ..model import ClaimedRun, Outcome
from ..states import AttemptOutcome
from ..store.ports import EventStore
from ..validation import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from ..app import App

RUNS_TOPIC = "cronbus.runs"
"""The system topic of run outcomes (of the ``default`` namespace)."""
SOURCE = "cronbus/worker"
_REFRESH_SECONDS = 5.0
_U64 = (1 << 64) - 1
"""A fence (a signed 64-bit integer) as 16 hexadecimal digits in event ids."""
log = logging.getLogger("cronbus.worker")


def runs_topic(namespace: str) -> str:
    """The system topic of the run outcomes of ``namespace``: ``cronbus.runs`` for
    ``default``, ``cronbus.runs.<namespace>`` for the others."""
    return RUNS_TOPIC if namespace == DEFAULT_NAMESPACE else f"{RUNS_TOPIC}.{namespace}"


def outcome_types(outcome: Outcome) -> list[str]:
    """The event types an ended attempt publishes (none for lost or cancelled attempts)."""
    kind = outcome.outcome
    if kind is AttemptOutcome.SUCCEEDED:
        return ["run.succeeded"]
    if kind is AttemptOutcome.FAILED:
        return ["run.failed"] if outcome.retry_at is not None else ["run.failed", "run.dead"]
    if kind is AttemptOutcome.TIMED_OUT:
        return ["run.timed_out"] if outcome.retry_at is not None else ["run.timed_out", "run.dead"]
    return []


def outcome_events(claimed: ClaimedRun, outcome: Outcome, now: float) -> list[NewEvent]:
    """The events of one recorded attempt; ``attempt`` in their data is the attempt's number
    (1, 2, ... in start order, lost attempts included), as ``runs show`` gives it."""
    data: dict[str, object] = {
        "run_id": claimed.run_id,
        "task": claimed.task,
        "queue": claimed.queue,
        "attempt": claimed.number,
    }
    if outcome.error is not None:
        data["error"] = {"type": outcome.error.type, "message": outcome.error.message}
    if outcome.retry_at is not None:
        data["retry_at"] = outcome.retry_at
    data_json = json.dumps(data)
    if outcome.result_json is not None:
        data_json = data_json[:-1] + ', "result": ' + outcome.result_json + "}"
    return [
        NewEvent(
            id=f"run-{claimed.run_id}-{outcome.attempt_id}-{claimed.fence & _U64:016x}-{kind}",
            type=kind,
            source=SOURCE,
            subject=f"run/{claimed.run_id}",
            time=now,
            data_json=data_json,
            key=str(claimed.run_id),
        )
        for kind in outcome_types(outcome)
    ]


class RunEvents:
    """Publishes a worker's recorded outcomes while someone subscribes to its namespace's
    ``cronbus.runs`` topic."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.topic = runs_topic(app.namespace)
        """Where this worker's outcomes go."""
        self._wanted = False
        self._checked_at: float | None = None
        self._pending: set[asyncio.Task[None]] = set()

    def ended(self, ended: Sequence[tuple[ClaimedRun, Outcome]], done: Sequence[bool]) -> None:
        """Publish the outcomes that were recorded, in the background."""
        fresh = self._checked_at is not None and (
            self.app.clock.now() - self._checked_at < _REFRESH_SECONDS
        )
        if fresh and not self._wanted:
            return  # nobody subscribes: no task, no store call
        recorded = [pair for pair, ok in zip(ended, done, strict=True) if ok]
        if not recorded:
            return
        task = asyncio.get_running_loop().create_task(self._publish(recorded))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait for the publishing still going on (a stopping worker)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def _publish(self, recorded: Sequence[tuple[ClaimedRun, Outcome]]) -> None:
        try:
            if not await self._subscribed():
                return
            now = self.app.clock.now()
            events = [e for claimed, o in recorded for e in outcome_events(claimed, o, now)]
            if events:
                await self._store.append(self.topic, events, now, namespace=self.app.namespace)
        except Exception:
            log.exception("publishing %d run outcomes to %s failed", len(recorded), self.topic)

    async def _subscribed(self) -> bool:
        now = self.app.clock.now()
        if self._checked_at is None or now - self._checked_at >= _REFRESH_SECONDS:
            self._checked_at = now
            subs = await self._store.list_subscriptions(self.topic)
            self._wanted = any(not s.paused for s in subs)
        return self._wanted

    @property
    def _store(self) -> EventStore:
        return self.app.store
