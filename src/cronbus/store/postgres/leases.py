"""Leases on runs in the PostgreSQL store: claims, completions, heartbeats and the reaper.

A claim locks its candidates with ``FOR UPDATE SKIP LOCKED`` as it reads them, so claimers never
wait for each other; a completion is fenced inside its UPDATE (attempt id, the claim's random
fence, and state). A worker's turn (complete N attempts, claim M runs) is seven statements in two
round trips whatever N and M. Lease expiry is the server's clock (see :mod:`..fencing`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...model import (
    ClaimedRun,
    ClaimRequest,
    Outcome,
)
from ...states import AttemptOutcome, RunState
from ..fencing import SERVER_CLOCK, EndedAttempt, LeaseClock, new_fence, settle
from ..logic import Ended, holds_cancelling, lease_lost, overlap_decisions, wakeups
from ..ports import Beat, HeldAttempt
from . import sql as q
from .connection import Connected, Cursor, Row, Tx
from .fanout import children_ended
from .jobs import after_triggers, runs_ended
from .limits import admit_limited, lock_space
from .rows import (
    Pick,
    attempt_row,
    claimed_runs,
    complete_params,
    fenced,
    finish_params,
    first_per_run,
    lost_change,
)

_REAP_BATCH = 1000
_KEY_LOCK_SPACE = 0x63627573
"""First key of the advisory locks on concurrency keys ('cbus'), apart from other users'."""
_NO_CLAIM = ClaimRequest(worker_id="", queues=(), limit=0, lease_seconds=0.0)
_ENDED_WAKEUPS = {state: wakeups(state) for state in RunState}
"""The wake-ups of each state for runs without a key, made once (a few sets each, per run)."""


class PostgresLeases(Connected):
    """The run leases role (:class:`~cronbus.store.ports.RunLeases`) of the PostgreSQL store."""

    lease_clock: LeaseClock = SERVER_CLOCK
    """Whose clock times leases: the server's; tests that move time by hand set ``"caller"``."""

    def _clock(self, now: float) -> float | None:
        """The ``clock`` parameter of lease statements: None lets the server read its own."""
        return None if self.lease_clock == SERVER_CLOCK else now

    async def claim(self, request: ClaimRequest, now: float) -> list[ClaimedRun]:
        """Promote due runs, then claim up to ``request.limit`` of them under a lease."""
        _, claimed = await self.complete_and_claim([], request, now)
        return claimed

    async def complete(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        """Record ended attempts in one transaction, each fenced by its attempt id."""
        if not outcomes:
            return []
        done, _ = await self.complete_and_claim(outcomes, _NO_CLAIM, now)
        return done

    async def complete_and_claim(
        self, outcomes: Sequence[Outcome], request: ClaimRequest, now: float
    ) -> tuple[list[bool], list[ClaimedRun]]:
        """Record ended attempts and claim the next runs: one transaction, two round trips."""
        wants = request.limit > 0 and bool(request.queues)
        if not outcomes and not wants:
            return [], []
        eligible = first_per_run(outcomes)
        async with self._db.transaction(durable=False) as tx:
            completing = await self._queue_complete(tx, eligible, now)
            picking = await self._queue_pick(tx, request, now) if wants else None
            ended = await completing.fetchall() if completing else []
            picks = [Pick(*row) for row in await picking.fetchall()] if picking else []
            await self._completed(tx, ended, now)
            done = await self._settle(tx, outcomes, fenced(outcomes, ended))
            picks = await self._apply_overlap(tx, picks, now)
            picks = await admit_limited(tx, picks, lock_space(self._db.options.schema), now)
            starting = await self._queue_start(tx, picks, request, now)
        claimed = claimed_runs(picks, await starting.fetchall()) if starting else []
        return done, claimed

    async def _settle(self, tx: Tx, outcomes: Sequence[Outcome], done: list[bool]) -> list[bool]:
        """Refused completions whose attempt already ended so: a retry after an ambiguous
        commit, recorded the first time (:func:`..fencing.already_recorded`)."""
        refused = [o.attempt_id for o, ok in zip(outcomes, done, strict=True) if not ok]
        if not refused:
            return done
        rows = await tx.rows(q.ENDED_ATTEMPTS, {"ids": refused})
        ended = {r[0]: EndedAttempt(r[0], r[1], AttemptOutcome(r[2])) for r in rows}
        return settle(list(outcomes), done, ended)

    async def _queue_complete(
        self, tx: Tx, outcomes: Sequence[Outcome], now: float
    ) -> Cursor | None:
        if not outcomes:
            return None
        return await tx.queue(q.COMPLETE, complete_params(outcomes, now))

    async def _queue_pick(self, tx: Tx, request: ClaimRequest, now: float) -> Cursor:
        await tx.queue(q.PROMOTE_DUE, {"now": now})
        params = {
            "queues": [share.name for share in request.queues],
            "limits": [share.limit for share in request.queues],
            "mosts": [share.most for share in request.queues],
            "limit": request.limit,
            "worker": request.worker_id,
            "namespace": request.namespace,
            "tasks": None if request.tasks is None else list(request.tasks),
            "labels": list(request.labels),
            "now": now,
        }
        return await tx.queue(q.PICK, params)

    async def _queue_start(
        self, tx: Tx, picks: Sequence[Pick], request: ClaimRequest, now: float
    ) -> Cursor | None:
        if not picks:
            return None
        params = {
            "ids": [pick.id for pick in picks],
            "fences": [new_fence() for _ in picks],
            "worker": request.worker_id,
            "lease": request.lease_seconds,
            "clock": self._clock(now),
            "now": now,
        }
        return await tx.queue(q.START, params)

    async def _completed(self, tx: Tx, ended: Sequence[Row], now: float) -> None:
        """Wake-ups, children counted at their parents, and job follow-ups of the attempts
        that ended (rows of ``COMPLETE``)."""
        triggers: dict[int, str] = {}
        parents: list[int] = []
        children: list[Ended] = []
        awaiting: list[int] = []
        for run_id, _, state, job_id, key, has_children, after, parent, index in ended:
            new = RunState(state)
            tx.nudges.update(_ENDED_WAKEUPS[new] if key is None else wakeups(new, key))
            if new is RunState.WAITING:
                awaiting.append(run_id)
            elif parent is not None and new.terminal:
                children.append(
                    Ended(run_id=run_id, state=new, parent_id=parent, child_index=index)
                )
            if job_id is not None and new.terminal:
                if after is not None:
                    triggers[job_id] = after
                if new is RunState.SUCCEEDED and has_children:
                    parents.append(job_id)
        await children_ended(tx, children, now, awaiting)
        await runs_ended(tx, triggers, parents, now)

    async def _apply_overlap(self, tx: Tx, picks: list[Pick], now: float) -> list[Pick]:
        """Job overlap policies among picked runs that share a concurrency key.

        Claimers lock the keys first, so two of them cannot both find a key free.
        """
        keys = sorted({p.concurrency_key for p in picks if p.concurrency_key is not None})
        if not keys:
            return picks
        await tx.queue(q.KEY_LOCKS, {"space": _KEY_LOCK_SPACE, "keys": keys})
        busy: dict[str, list[int]] = {}
        for key, run_id in await tx.rows(q.ACTIVE_KEYS, {"keys": keys}):
            busy.setdefault(key, []).append(run_id)
        kept, skipped, cancel = overlap_decisions(
            picks, busy, lambda p: (p.concurrency_key, p.overlap)
        )
        if cancel:
            await tx.queue(q.CANCEL_RUNNING, {"ids": cancel, "now": now})
            tx.nudges.update(wakeups(RunState.CANCELLING))
        if skipped:
            await tx.queue(q.SKIP_RUNS, {"ids": [p.id for p in skipped], "now": now})
            children = [
                Ended(
                    run_id=p.id,
                    state=RunState.SKIPPED,
                    parent_id=p.parent_id,
                    child_index=p.child_index,
                )
                for p in skipped
            ]
            await children_ended(tx, children, now)
            ended = [p.job_id for p in skipped if p.job_id is not None]
            ending = await after_triggers(tx, ended)
            await runs_ended(tx, ending, [], now)
        return kept

    async def heartbeat(
        self, worker_id: str, now: float, lease_seconds: float
    ) -> list[HeldAttempt]:
        """Renew every lease the worker holds, and its registry entry, in one statement; the
        leases run ``lease_seconds`` of the server's clock from now."""
        return (await self.beat(worker_id, now, lease_seconds)).held

    async def beat(self, worker_id: str, now: float, lease_seconds: float) -> Beat:
        """:meth:`heartbeat`, with whether the worker was asked to drain (same statement)."""
        params = {
            "now": now,
            "worker": worker_id,
            "lease": lease_seconds,
            "clock": self._clock(now),
        }
        rows = await self._db.rows(q.HEARTBEAT, params)
        held = [
            HeldAttempt(
                run_id=r[0],
                attempt_id=r[1],
                cancelling=holds_cancelling(RunState(r[2])),
                fence=r[3],
            )
            for r in rows
            if r[0] is not None
        ]
        return Beat(held=held, drain_requested=bool(rows and rows[0][4]))

    async def reap(self, now: float, max_lost: int) -> list[int]:
        """Requeue the runs of expired leases (by the server's clock); a run lost ``max_lost``
        times becomes dead."""
        params = {"clock": self._clock(now), "limit": _REAP_BATCH}
        async with self._db.transaction(durable=False) as tx:
            rows = await tx.rows(q.EXPIRED, params)
            if rows:
                await self._reap_rows(tx, rows, now, max_lost)
        return [row[0] for row in rows]

    async def _reap_rows(self, tx: Tx, rows: Sequence[Row], now: float, max_lost: int) -> None:
        changes, attempts, ended, children = [], [], [], []
        for run_id, attempt_id, state, lost, eta, job_id, parent, index in rows:
            change, outcome = lease_lost(
                run_id, attempt_id, RunState(state), lost, max_lost, eta, now
            )
            tx.nudges.update(wakeups(change.state))
            if change.state.terminal and job_id is not None:
                ended.append(job_id)
            if change.state.terminal and parent is not None:
                children.append(
                    Ended(run_id=run_id, state=change.state, parent_id=parent, child_index=index)
                )
            changes.append(lost_change(run_id, attempt_id, state, change))
            attempts.append(attempt_row(outcome))
        await tx.queue(q.COMPLETE, finish_params(changes, attempts, now))
        await children_ended(tx, children, now)
        ending = await after_triggers(tx, ended)
        await runs_ended(tx, ending, [], now)

    async def age_retries(self, now: float, after: float) -> int:
        """Promote retries that waited ``after`` seconds to the fresh lane."""
        return await self._db.execute(q.AGE_RETRIES, {"cutoff": now - after})
