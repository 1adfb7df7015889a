"""A parent's children in the PostgreSQL store: created by a running parent (``ctx.map``),
listed, and cancelled with a waiting parent."""

from __future__ import annotations

from collections.abc import Sequence

from ...distribution.fanout import encode_reduce
from ...errors import InvalidArgumentError, LeaseLostError
from ...model import ClaimedRun, NewRun, Run
from ...states import TRANSITIONS, RunEvent, RunState
from ..logic import Ended, cancels_children, wakeups
from ..ports import RUNS_CHANNEL
from ..rows import run_from_row
from . import fanout_sql as fq
from .connection import Connected, Row, Tx
from .inserts import insert_runs
from .rows import arrays

_CANCEL = TRANSITIONS[RunEvent.CANCEL]


def _check_child(child: NewRun, parent_id: int) -> None:
    """Refuse a child that does not name this parent and a place, or that fans out itself."""
    if child.parent_id != parent_id or child.child_index is None or child.child_index < 0:
        raise InvalidArgumentError(
            f"a child of run {parent_id} needs parent_id={parent_id} and a child_index >= 0",
            field="children",
        )
    if child.fanout is not None or child.idempotency_key is not None or child.job_id is not None:
        raise InvalidArgumentError(
            "a mapped child cannot fan out, nor carry an idempotency key or a job",
            field="children",
        )


def _fresh(children: Sequence[NewRun], parent_id: int) -> list[NewRun]:
    """The children by index, the first of each index only."""
    fresh: dict[int, NewRun] = {}
    for child in children:
        _check_child(child, parent_id)
        assert child.child_index is not None
        fresh.setdefault(child.child_index, child)
    return [fresh[index] for index in sorted(fresh)]


class PostgresChildren(Connected):
    """Map children (:meth:`~cronbus.store.ports.RunLeases.spawn`) and listings of children
    (:meth:`~cronbus.store.ports.Runs.list_children`) of the PostgreSQL store."""

    async def spawn(
        self,
        parent: ClaimedRun,
        children: Sequence[NewRun],
        reduce: NewRun | None,
        now: float,
    ) -> int:
        """Create map children of a running parent in one transaction, fenced by its attempt
        and fence (:class:`~cronbus.errors.LeaseLostError` when it no longer holds the run);
        a child whose index exists already is skipped. Returns how many were new."""
        fresh = _fresh(children, parent.run_id)
        spec = encode_reduce(reduce) if reduce is not None else None
        held = {"id": parent.run_id, "attempt": parent.attempt_id, "fence": parent.fence}
        async with self._db.transaction() as tx:
            holding = await tx.queue(fq.HOLDS_PARENT, held)
            params = {"id": parent.run_id, "indexes": [c.child_index for c in fresh]}
            existing = await tx.queue(fq.EXISTING_CHILDREN, params)
            if not await holding.fetchall():
                raise LeaseLostError(
                    f"attempt {parent.attempt_id} no longer holds run {parent.run_id}; its "
                    "children were not created"
                )
            made = {row[0] for row in await existing.fetchall()}
            new = [child for child in fresh if child.child_index not in made]
            added = 0
            if new:
                inserting = await insert_runs(tx, new, now)
                added = sum(1 for created, _ in await inserting.fetchall() if created)
                tx.nudges.add(RUNS_CHANNEL)
            params = {"id": parent.run_id, "added": added, "reduce": spec}
            await tx.queue(fq.ADD_CHILDREN, params)
        return added

    async def list_children(
        self, parent_id: int, after_index: int | None = None, limit: int = 100
    ) -> list[Run]:
        """A parent's children by ``child_index`` after ``after_index`` (keyset); the reduce
        run, which has no index, comes last, on the page that has room for it after the last
        child (a page that ends with it is the last)."""
        if limit <= 0:
            return []
        after = -1 if after_index is None else after_index
        params = {"parent": parent_id, "after": after, "limit": limit}
        rows = await self._db.rows(fq.LIST_CHILDREN, params)
        if len(rows) < limit:
            rows += await self._db.rows(fq.REDUCE_OF, {"parent": parent_id})
        return [run_from_row(row) for row in rows]


async def cancel_children(tx: Tx, parent: int, locked: Sequence[Row], now: float) -> list[Ended]:
    """Cancel the children (and reduce run) of a cancelled waiting parent that are still
    going: waiting ones cancelled, running ones asked to stop, a waiting child parent with its
    own children. ``locked``: the parent's children locked before the parent (rows of
    ``LOCK_CHILDREN``), or empty to lock them now. Returns the children that ended."""
    ended: list[Ended] = []
    rows = list(locked) or await tx.rows(fq.LOCK_CHILDREN, {"parent": parent})
    while rows:
        changes: list[Row] = []
        deeper: list[int] = []
        for run_id, state, parent_id, child_index in rows:
            old = RunState(state)
            new = _CANCEL.get(old, old)
            if new is old:
                continue
            changes.append((run_id, old.value, new.value, now if new.terminal else None))
            tx.nudges.update(wakeups(new))
            if new.terminal:
                ended.append(
                    Ended(run_id=run_id, state=new, parent_id=parent_id, child_index=child_index)
                )
            if cancels_children(old):
                deeper.append(run_id)
        if changes:
            params = {**arrays(("ids", "olds", "news", "finished"), changes), "now": now}
            await tx.queue(fq.SET_STATES, params)
        rows = []
        for child_parent in deeper:
            rows += await tx.rows(fq.LOCK_CHILDREN, {"parent": child_parent})
    return ended
