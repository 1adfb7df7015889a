"""Leases on runs in the SQLite store: claims, completions, heartbeats and the reaper.

A claim is one write transaction that reads and updates, so no other writer can slip between the
two. Attempt ids are read from ``sqlite_sequence`` while the lock is held, because AUTOINCREMENT
ids inside one write transaction are consecutive. Completions are fenced by the attempt id and
the claim's random fence, as on PostgreSQL; leases are timed by the caller's ``now`` (one
machine, one clock: see :mod:`..fencing`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...distribution.fanout import Settle, Tally, encode_reduce
from ...model import ClaimedRun, ClaimRequest, NewRun, Outcome, QueueShare
from ...states import AttemptOutcome, RunState
from ..fencing import EndedAttempt, new_fence, settle
from ..logic import (
    Ended,
    finish,
    holds_cancelling,
    lease_lost,
    overlap_decisions,
    own_end,
    wakeups,
)
from ..ports import Beat, HeldAttempt
from . import sql as q
from .connection import Connected
from .endings import runs_ended
from .fanout import create_reduce, settle_broadcasts, spawn
from .limits import admitted
from .routing import reroute
from .rows import Row, attempt_params, execute, finish_params, sequence

_REAP_BATCH = 1000
_NO_CLAIM = ClaimRequest(worker_id="", queues=(), limit=0, lease_seconds=0.0)
_ENDED_WAKEUPS = {state: wakeups(state) for state in RunState}
"""The wake-ups of each state for runs without a key, made once (a few sets each, per run)."""


class SqliteLeases(Connected):
    """The run leases role (:class:`~cronbus.store.ports.RunLeases`) of the SQLite store."""

    async def claim(self, request: ClaimRequest, now: float) -> list[ClaimedRun]:
        """Promote due runs, then claim up to ``request.limit`` of them under a lease."""
        _, claimed = await self.complete_and_claim([], request, now)
        return claimed

    async def complete_and_claim(
        self, outcomes: Sequence[Outcome], request: ClaimRequest, now: float
    ) -> tuple[list[bool], list[ClaimedRun]]:
        """Record ended attempts and claim the next runs, in one transaction."""
        wants = request.limit > 0 and bool(request.queues)
        if not outcomes and not wants:
            return [], []
        nudges: set[str] = set()
        exchange = self._exchange
        done, claimed = await self._transact(
            exchange, outcomes, request, now, nudges, durable=False, wake=nudges, inline="write"
        )
        await self._nudge(nudges)
        return done, claimed

    def _exchange(
        self,
        conn: sqlite3.Connection,
        outcomes: Sequence[Outcome],
        request: ClaimRequest,
        now: float,
        nudges: set[str],
    ) -> tuple[list[bool], list[ClaimedRun]]:
        done = self._complete_in(conn, outcomes, now, nudges)
        wants = request.limit > 0 and bool(request.queues)
        claimed = self._claim_in(conn, request, now, nudges) if wants else []
        return done, claimed

    def _claim_in(
        self, conn: sqlite3.Connection, request: ClaimRequest, now: float, nudges: set[str]
    ) -> list[ClaimedRun]:
        conn.execute(q.PROMOTE_DUE, {"now": now})
        rows = self._overlap(conn, self._pick(conn, request, now), now, nudges)
        rows = admitted(conn, rows, now)
        if not rows:
            return []
        first = sequence(conn, "attempts") + 1
        worker, expires = request.worker_id, now + request.lease_seconds
        started = [(row, first + i, new_fence()) for i, row in enumerate(rows)]
        conn.executemany(
            q.INSERT_ATTEMPT, [(row[0], row[1] + 1, worker, now, f) for row, _, f in started]
        )
        conn.executemany(
            q.START_RUN, [(worker, expires, a, f, now, row[0]) for row, a, f in started]
        )
        ids = json.dumps([row[0] for row in rows])
        payload = {r[0]: (r[1], r[2], r[3]) for r in conn.execute(q.PAYLOADS, (ids,))}
        missing = ("[]", "{}", None)
        return [_claimed(row, a, f, payload.get(row[0], missing)) for row, a, f in started]

    def _overlap(
        self, conn: sqlite3.Connection, rows: list[Row], now: float, nudges: set[str]
    ) -> list[Row]:
        """Apply job overlap policies (:func:`.logic.overlap_decisions`) to picked rows;
        ``queue`` runs whose key is busy were not even selected."""
        keys = {row[8] for row in rows if row[8] is not None}
        if not keys:
            return rows
        busy: dict[str, list[int]] = {}
        for key, run_id in conn.execute(q.ACTIVE_KEYS, (json.dumps(sorted(keys)),)):
            busy.setdefault(key, []).append(run_id)
        kept, skipped_rows, cancel = overlap_decisions(rows, busy, lambda r: (r[8], r[9]))
        skipped = [row[0] for row in skipped_rows]
        for run_id in cancel:
            conn.execute(q.CANCEL_RUNNING, {"id": run_id, "now": now})
        if cancel:
            nudges.update(wakeups(RunState.CANCELLING))
        if skipped:
            conn.executemany(q.SKIP_RUN, [{"id": run_id, "now": now} for run_id in skipped])
            skips = [row for row in skipped_rows if row[10] is not None]
            children = [_ended(row, RunState.SKIPPED, 10) for row in skips]
            runs_ended(conn, children, skipped, now, nudges)
        return kept

    def _pick(self, conn: sqlite3.Connection, request: ClaimRequest, now: float) -> list[Row]:
        """Each queue's share first, then what is left to the queues that had more (each queue
        at most its ``most``)."""
        sql = q.SELECT_READY[request.tasks is not None, bool(request.labels)]
        common = {
            "namespace": request.namespace,
            "worker": request.worker_id,
            "now": now,
            "tasks": json.dumps(list(request.tasks or ())),
            "labels": json.dumps(list(request.labels)),
        }
        picked: list[Row] = []
        full: list[tuple[QueueShare, int]] = []
        for share in request.queues:
            first = share.limit if share.most is None else min(share.limit, share.most)
            if first <= 0:
                # A share of 0 with room (the slot plan's spare queues) waits for what the
                # others leave, in the second pass, as PostgreSQL's claim does.
                if share.limit == 0 and share.most is not None and share.most > 0:
                    full.append((share, 0))
                continue
            params = {**common, "queue": share.name, "limit": first, "offset": 0}
            rows = conn.execute(sql, params).fetchall()
            picked.extend(rows)
            if len(rows) == first and (share.most is None or share.most > first):
                full.append((share, first))
        for share, first in full:
            left = request.limit - len(picked)
            if left <= 0:
                break
            if share.most is not None:
                left = min(left, share.most - first)
            params = {**common, "queue": share.name, "limit": left, "offset": first}
            picked.extend(conn.execute(sql, params).fetchall())
        return picked[: request.limit]

    async def complete(self, outcomes: Sequence[Outcome], now: float) -> list[bool]:
        """Record ended attempts in one transaction, each fenced by its attempt id."""
        if not outcomes:
            return []
        done, _ = await self.complete_and_claim(outcomes, _NO_CLAIM, now)
        return done

    def _complete_in(
        self, conn: sqlite3.Connection, outcomes: Sequence[Outcome], now: float, nudges: set[str]
    ) -> list[bool]:
        if not outcomes:
            return []
        runs: list[dict[str, Any]] = []
        attempts: list[dict[str, Any]] = []
        done: list[bool] = []
        ended_jobs: list[int] = []
        children: list[Ended] = []
        reducing: list[tuple[int, str]] = []
        ids = json.dumps([o.run_id for o in outcomes])
        held = {row[0]: row for row in conn.execute(q.HELD, (ids,))}
        for outcome in outcomes:
            row = held.pop(outcome.run_id, None)
            if row is None or not _holds(row, outcome):
                done.append(False)
                continue
            change = finish(RunState(row[2]), outcome, row[3], now)
            if row[9] is not None:
                # A map parent's own attempt: it may now wait for its children, or settle.
                change, decision = own_end(change, _tally(row))
                if decision is Settle.REDUCE:
                    reducing.append((outcome.run_id, row[12]))
            key = row[5] or row[14]
            nudges.update(
                _ENDED_WAKEUPS[change.state] if key is None else wakeups(change.state, key)
            )
            if change.state.terminal:
                if row[4] is not None:
                    ended_jobs.append(outcome.run_id)
                if row[7] is not None:
                    children.append(_ended(row, change.state, 7))
            runs.append(finish_params(outcome.run_id, outcome.attempt_id, change, now))
            attempts.append(attempt_params(outcome, now))
            done.append(True)
        conn.executemany(q.FINISH_RUN, runs)
        conn.executemany(q.FINISH_ATTEMPT, attempts)
        for parent, spec in reducing:
            create_reduce(conn, parent, spec, now, nudges)
        runs_ended(conn, children, ended_jobs, now, nudges)
        return _settle(conn, outcomes, done)

    async def heartbeat(
        self, worker_id: str, now: float, lease_seconds: float
    ) -> list[HeldAttempt]:
        """Renew every lease the worker holds, in one statement."""
        return (await self.beat(worker_id, now, lease_seconds)).held

    async def beat(self, worker_id: str, now: float, lease_seconds: float) -> Beat:
        """Renew every lease the worker holds; read whether it was asked to drain."""
        expires = now + lease_seconds
        rows, drain = await self._transact(
            _beat, worker_id, now, expires, durable=False, inline="write"
        )
        held = [
            HeldAttempt(
                run_id=r[0],
                attempt_id=r[1],
                cancelling=holds_cancelling(RunState(r[2])),
                fence=r[3],
            )
            for r in rows
        ]
        return Beat(held=held, drain_requested=drain)

    async def reap(self, now: float, max_lost: int) -> list[int]:
        """Requeue the runs of expired leases; a run lost ``max_lost`` times becomes dead."""
        nudges: set[str] = set()
        reaped = await self._transact(_reap, now, max_lost, nudges, durable=False, wake=nudges)
        await self._nudge(nudges)
        return reaped

    async def age_retries(self, now: float, after: float) -> int:
        """Promote retries that waited ``after`` seconds to the fresh lane."""
        return await self._transact(execute, q.AGE_RETRIES, {"cutoff": now - after}, durable=False)

    async def spawn(
        self,
        parent: ClaimedRun,
        children: Sequence[NewRun],
        reduce: NewRun | None,
        now: float,
    ) -> int:
        """Create map children of a running parent in one transaction, fenced by its attempt
        (:class:`~cronbus.errors.LeaseLostError` when it no longer holds the run)."""
        spec = encode_reduce(reduce) if reduce is not None else None
        nudges = set(wakeups(RunState.QUEUED))
        made = await self._transact(
            spawn,
            parent.run_id,
            parent.attempt_id,
            parent.fence,
            children,
            spec,
            now,
            wake=nudges,
        )
        if made:
            await self._nudge(nudges)
        return made

    async def reroute(self, now: float) -> int:
        """Route again the waiting runs targeted at workers that are no longer live."""
        nudges: set[str] = set()
        moved = await self._transact(_reroute, now, nudges, durable=False, wake=nudges)
        await self._nudge(nudges)
        return moved

    async def settle_broadcasts(self, now: float, wait: float) -> int:
        """Expand the broadcasts that waited for a live worker and have one; end dead those
        that waited ``wait`` seconds in vain (see :func:`.fanout.settle_broadcasts`)."""
        nudges: set[str] = set()
        changed = await self._transact(
            _settle_broadcasts, now, wait, nudges, durable=False, wake=nudges
        )
        await self._nudge(nudges)
        return changed


def _claimed(
    row: Row, attempt_id: int, fence: int, payload: tuple[str, str, str | None]
) -> ClaimedRun:
    """A row of ``SELECT_READY`` started under ``attempt_id`` and ``fence``, as a claim."""
    run_id, attempts, used, task, queue, max_attempts, timeout, eta, *_ = row
    return ClaimedRun(
        run_id=run_id,
        attempt_id=attempt_id,
        attempt=used + 1,
        number=attempts + 1,
        fence=fence,
        task=task,
        queue=queue,
        args_json=payload[0],
        kwargs_json=payload[1],
        max_attempts=max_attempts,
        timeout=timeout,
        eta=eta,
        parent_id=row[10],
        child_index=row[11],
        shard_total=row[12],
        trace=payload[2],
    )


def _ended(row: Row, state: RunState, at: int) -> Ended:
    """A run that ended in ``state``, from a row holding its parent id and child index at
    columns ``at`` and ``at + 1``."""
    return Ended(run_id=row[0], state=state, parent_id=row[at], child_index=row[at + 1])


def _tally(row: Row) -> Tally:
    """A parent's counters from a row of ``HELD``."""
    return Tally(
        total=row[9],
        ended=row[10],
        succeeded=row[11],
        has_reduce=row[12] is not None,
        reduce_run=row[13],
    )


def _holds(row: Row, outcome: Outcome) -> bool:
    """Whether a run (a row of ``HELD``) still holds the outcome's attempt under its fence."""
    return row[1] == outcome.attempt_id and outcome.fence in (None, row[6])


def _settle(conn: sqlite3.Connection, outcomes: Sequence[Outcome], done: list[bool]) -> list[bool]:
    """Refused completions whose attempt already ended so: a retry after an ambiguous commit,
    recorded the first time (:func:`..fencing.already_recorded`)."""
    refused = [o.attempt_id for o, ok in zip(outcomes, done, strict=True) if not ok]
    if not refused:
        return done
    rows = conn.execute(q.ENDED_ATTEMPTS, (json.dumps(refused),)).fetchall()
    ended = {r[0]: EndedAttempt(r[0], r[1], AttemptOutcome(r[2])) for r in rows}
    return settle(list(outcomes), done, ended)


def _beat(
    conn: sqlite3.Connection, worker_id: str, now: float, expires: float
) -> tuple[list[Row], bool]:
    """Renew the worker's leases and registry entry; the attempts it holds, and whether it was
    asked to drain (an unregistered worker was not)."""
    rows = conn.execute(q.RENEW_LEASES, {"expires": expires, "worker": worker_id}).fetchall()
    seen = conn.execute(q.WORKER_SEEN, {"now": now, "worker": worker_id}).fetchone()
    return rows, bool(seen[0]) if seen is not None else False


def _reroute(conn: sqlite3.Connection, now: float, nudges: set[str]) -> int:
    """Reroute stranded runs; broadcast children that ended dead are counted at parents."""
    moved, ended = reroute(conn, now)
    if moved:
        nudges.update(wakeups(RunState.QUEUED))
    runs_ended(conn, ended, [], now, nudges)
    return moved


def _settle_broadcasts(conn: sqlite3.Connection, now: float, wait: float, nudges: set[str]) -> int:
    changed, ended, job_runs = settle_broadcasts(conn, now, wait)
    if changed:
        nudges.update(wakeups(RunState.QUEUED))
    runs_ended(conn, ended, job_runs, now, nudges)
    return changed


def _reap(conn: sqlite3.Connection, now: float, max_lost: int, nudges: set[str]) -> list[int]:
    """End the attempts of expired leases (see :func:`~cronbus.store.logic.lease_lost`)."""
    rows = conn.execute(q.EXPIRED, {"now": now, "limit": _REAP_BATCH}).fetchall()
    runs, attempts, ended, children = [], [], [], []
    for run_id, attempt_id, state, lost, eta, job_id, parent_id, index in rows:
        change, outcome = lease_lost(run_id, attempt_id, RunState(state), lost, max_lost, eta, now)
        nudges.update(wakeups(change.state))
        if change.state.terminal and job_id is not None:
            ended.append(run_id)
        if change.state.terminal and parent_id is not None:
            children.append(
                Ended(run_id=run_id, state=change.state, parent_id=parent_id, child_index=index)
            )
        runs.append(finish_params(run_id, attempt_id, change, now))
        attempts.append(attempt_params(outcome, now))
    conn.executemany(q.FINISH_RUN, runs)
    conn.executemany(q.FINISH_ATTEMPT, attempts)
    runs_ended(conn, children, ended, now, nudges)
    return [r[0] for r in rows]
