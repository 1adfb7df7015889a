"""Dead letters: runs and deliveries that used up their attempts, kept with their last error.

``list`` shows both kinds, roughly newest first (two keyset streams, runs and deliveries, merged
by the time each died); a filter that only one kind has (``task``, ``queue`` for runs,
``subscription`` for deliveries) narrows it to that kind. ``requeue`` pushes them again with a
fresh attempt budget and ``purge`` deletes them; both handle what they can and report each id
they refuse, with why (unknown, of another namespace, not dead).
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ..errors import InvalidArgumentError, SubscriptionNotFoundError
from ..events.records import Delivery
from ..events.states import DeliveryState
from ..model import Run, RunFilter
from ..states import RunState
from ..store.ports import EVENTS_CHANNEL
from ..task import check_queue
from ..validation import check_identifier, check_label, shorten
from .context import Context, check_id, naming
from .deliveries import list_deliveries
from .pages import DEFAULT_LIMIT, Page, check_limit, decode_cursor, encode_cursor
from .redaction import Redactor
from .views import DeadLetter, DeadLetterKind, DeadLetterResult

_CURSOR = {"r": int, "d": int}
_BATCH = 500
"""Dead letters requeued or purged per store call when all of them are asked for."""
KINDS = ("runs", "deliveries")
"""The kinds of dead letters, as ``list`` takes them."""
_PLURAL = {"run": "runs", "delivery": "deliveries"}
_Act = Callable[[Sequence[int]], Awaitable[list[int]]]
Progress = Callable[[int], object]
"""Told how many dead letters each batch handled (``cronbus dlq requeue``'s bar)."""


def _ignore(done: int) -> None:
    """The progress of a caller that shows none."""


def check_ids(ids: Iterable[object], field: str) -> builtins.list[int]:
    """Ids: whole numbers from 1, each once, in the order given."""
    if isinstance(ids, str | bytes):
        raise InvalidArgumentError(
            f"{field} must be a list of ids, got {shorten(ids)}", field=field
        )
    chosen: list[int] = []
    for value in ids:
        chosen.append(check_id(value, field))
    return list(dict.fromkeys(chosen))


def died_at(letter: Run | Delivery) -> float:
    """When a run or a delivery was given up."""
    if isinstance(letter, Run):
        return letter.finished_at or letter.updated_at
    return letter.updated_at


class DeadLettersService:
    """Dead letters of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    # -- list ------------------------------------------------------------------------------------
    async def list(
        self,
        kind: str | None = None,
        task: str | None = None,
        queue: str | None = None,
        subscription: str | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """Dead runs and dead deliveries, roughly newest first, with their last error."""
        self._c.read()
        limit = check_limit(limit)
        runs, deliveries = kinds(kind, task is not None or queue is not None, subscription)
        with naming("task"):
            task = None if task is None else check_label(task, "task")
        with naming("queue"):
            queue = None if queue is None else check_queue(queue)
        names = await self._subscriptions(subscription)
        position = (
            {"r": -1, "d": -1} if cursor is None else decode_cursor(cursor, _CURSOR)
        )  # -1: from the newest; 0: that stream is done
        found_runs: list[Run] = []
        if runs and position["r"] != 0:
            wanted = RunFilter(
                states=(RunState.DEAD,),
                task=task,
                queue=queue,
                limit=limit + 1,
                before_id=None if position["r"] < 0 else position["r"],
                namespace=self._c.namespace,
            )
            # Their payloads as the caller may see them (:mod:`.redaction`).
            found_runs = Redactor(self._c).runs(await self._c.store.list_runs(wanted))
        found_deliveries: list[Delivery] = []
        if deliveries and position["d"] != 0:
            before = None if position["d"] < 0 else position["d"]
            found_deliveries = await self._dead_deliveries(names, before, limit + 1)
        return _merge(found_runs, found_deliveries, limit, position, runs, deliveries)

    async def _subscriptions(self, subscription: str | None) -> builtins.list[str]:
        """The names of the namespace's subscriptions (only ``subscription``, checked, if
        given: an unknown one is an error, not an empty list)."""
        if subscription is not None:
            with naming("subscription"):
                check_identifier(subscription, "subscription")
            sub = await self._c.store.get_subscription(subscription)
            missing = SubscriptionNotFoundError(f"no subscription named {subscription!r}")
            self._c.owns(sub.spec.namespace, missing)
            return [subscription]
        subs = await self._c.store.list_subscriptions(namespace=self._c.namespace)
        return [sub.name for sub in subs]

    async def _dead_deliveries(
        self, names: Sequence[str], before: int | None, limit: int
    ) -> builtins.list[Delivery]:
        found: list[Delivery] = []
        for name in names:
            found += await list_deliveries(self._c, name, (DeliveryState.DEAD,), before, limit)
        return sorted(found, key=lambda d: d.id, reverse=True)[:limit]

    # -- requeue ---------------------------------------------------------------------------------
    async def requeue(
        self,
        run_ids: Sequence[int] = (),
        delivery_ids: Sequence[int] = (),
        *,
        all_runs: bool = False,
        all_deliveries: bool = False,
        subscription: str | None = None,
        progress: Progress | None = None,
    ) -> DeadLetterResult:
        """Push dead letters again with a fresh attempt budget: the runs and deliveries named,
        or every dead run (``all_runs``) or dead delivery (``all_deliveries``, of
        ``subscription`` if given) of the namespace. Named ids that are unknown, of another
        namespace or not dead are refused, with why, after the others are requeued.

        Runs go a batch at a time (each its own transaction: a run's requeue stands alone), and
        ``progress`` is told how many each batch requeued; each subscription's dead deliveries
        go in one statement (the store has no keyset over them to walk)."""
        self._c.write()
        runs, deliveries = self._chosen(
            run_ids, delivery_ids, all_runs, all_deliveries, subscription
        )
        tell = progress or _ignore
        now = self._c.now()
        result = DeadLetterResult()
        if all_runs:
            result.runs.extend(await self._every_dead_run(self._requeue_runs, tell))
        elif runs:
            dead, refused = await self._dead_runs(runs)
            result.runs.extend(await _in_batches(dead, self._requeue_runs, tell))
            result.refused.extend(refused)
        if all_deliveries:
            for name in await self._subscriptions(subscription):
                done = await self._c.store.requeue_deliveries(None, now, subscription=name)
                result.deliveries.extend(done)
                tell(len(done))
        elif deliveries:
            dead, refused = await self._dead_deliveries_named(deliveries)
            done = await _in_batches(dead, self._requeue_deliveries, tell)
            result.deliveries.extend(done)
            result.refused.extend(refused)
            result.refused.extend(f"delivery {i} was not requeued" for i in dead if i not in done)
        if result.deliveries:
            await self._c.store.notify([EVENTS_CHANNEL])
        if result.count:
            await self._c.audit(
                "dead_letters.requeue",
                "dead_letters",
                {"runs": result.runs, "deliveries": result.deliveries},
            )
        return result

    async def _requeue_runs(self, ids: Sequence[int]) -> builtins.list[int]:
        return await self._c.store.requeue(ids, self._c.now())

    async def _requeue_deliveries(self, ids: Sequence[int]) -> builtins.list[int]:
        return await self._c.store.requeue_deliveries(ids, self._c.now())

    # -- purge -----------------------------------------------------------------------------------
    async def purge(
        self,
        run_ids: Sequence[int] = (),
        delivery_ids: Sequence[int] = (),
        *,
        all_runs: bool = False,
        all_deliveries: bool = False,
        subscription: str | None = None,
    ) -> DeadLetterResult:
        """Delete dead letters for good (runs with their attempts, deliveries with theirs):
        the ones named, or every dead run or delivery of the namespace. Named ids that are
        unknown, of another namespace or not dead are refused, with why."""
        self._c.write()
        runs, deliveries = self._chosen(
            run_ids, delivery_ids, all_runs, all_deliveries, subscription
        )
        result = DeadLetterResult()
        if all_runs:
            result.runs.extend(await self._every_dead_run(self._delete_runs))
        elif runs:
            dead, refused = await self._dead_runs(runs)
            result.runs.extend(await self._delete_runs(dead) if dead else [])
            result.refused.extend(refused)
            result.refused.extend(f"run {i} was not purged" for i in dead if i not in result.runs)
        if all_deliveries:
            names = await self._subscriptions(subscription)
            while True:
                batch = await self._dead_deliveries(names, None, _BATCH)
                if not batch:
                    break
                done = await self._c.store.delete_deliveries([d.id for d in batch])
                result.deliveries.extend(done)
                if not done:
                    break
        elif deliveries:
            dead, refused = await self._dead_deliveries_named(deliveries)
            done = await self._c.store.delete_deliveries(dead) if dead else []
            result.deliveries.extend(done)
            result.refused.extend(refused)
            result.refused.extend(f"delivery {i} was not purged" for i in dead if i not in done)
        if result.count:
            await self._c.audit(
                "dead_letters.purge",
                "dead_letters",
                {"runs": result.runs, "deliveries": result.deliveries},
            )
        return result

    async def _delete_runs(self, ids: Sequence[int]) -> builtins.list[int]:
        return await self._c.store.delete_runs(ids, self._c.now())

    # -- helpers ---------------------------------------------------------------------------------
    def _chosen(
        self,
        run_ids: Sequence[int],
        delivery_ids: Sequence[int],
        all_runs: bool,
        all_deliveries: bool,
        subscription: str | None,
    ) -> tuple[builtins.list[int], builtins.list[int]]:
        runs = check_ids(run_ids, "run_ids")
        deliveries = check_ids(delivery_ids, "delivery_ids")
        if all_runs and runs:
            raise InvalidArgumentError("give run ids or all runs, not both", field="run_ids")
        if all_deliveries and deliveries:
            raise InvalidArgumentError(
                "give delivery ids or all deliveries, not both", field="delivery_ids"
            )
        if subscription is not None and not all_deliveries:
            raise InvalidArgumentError(
                "subscription goes with all deliveries", field="subscription"
            )
        if not (runs or deliveries or all_runs or all_deliveries):
            raise InvalidArgumentError(
                "give run ids, delivery ids, all runs or all deliveries", field="run_ids"
            )
        return runs, deliveries

    async def _dead_runs(
        self, run_ids: Sequence[int]
    ) -> tuple[builtins.list[int], builtins.list[str]]:
        """The named runs that are dead in this namespace, and why each other one is not.

        The store's requeue also takes cancelled runs; the dead letters are only dead ones."""
        found = {run.id: run for run in await self._c.store.get_runs(run_ids)}
        dead: list[int] = []
        refused: list[str] = []
        for run_id in run_ids:
            run = found.get(run_id)
            if run is None or run.namespace != self._c.namespace:
                refused.append(f"no run has id {run_id}")
            elif run.state is not RunState.DEAD:
                refused.append(f"run {run_id} is {run.state}, not dead")
            else:
                dead.append(run_id)
        return dead, refused

    async def _dead_deliveries_named(
        self, delivery_ids: Sequence[int]
    ) -> tuple[builtins.list[int], builtins.list[str]]:
        """The named deliveries that are dead in this namespace, and why each other one is
        not (a delivery belongs to its subscription's namespace)."""
        mine = set(await self._subscriptions(None))
        dead: list[int] = []
        refused: list[str] = []
        for delivery_id in delivery_ids:
            try:
                delivery = await self._c.store.get_delivery(delivery_id)
            except LookupError:
                delivery = None
            if delivery is None or delivery.subscription not in mine:
                refused.append(f"no delivery has id {delivery_id}")
            elif delivery.state is not DeliveryState.DEAD:
                refused.append(f"delivery {delivery_id} is {delivery.state.value}, not dead")
            else:
                dead.append(delivery_id)
        return dead, refused

    async def _every_dead_run(self, act: _Act, tell: Progress = _ignore) -> builtins.list[int]:
        """Apply ``act`` to every dead run of the namespace, a batch at a time."""
        handled: list[int] = []
        before: int | None = None
        while True:
            wanted = RunFilter(
                states=(RunState.DEAD,),
                limit=_BATCH,
                before_id=before,
                namespace=self._c.namespace,
            )
            batch = [run.id for run in await self._c.store.list_runs(wanted)]
            if not batch:
                return handled
            done = await act(batch)
            handled.extend(done)
            tell(len(done))
            before = min(batch)


async def _in_batches(ids: Sequence[int], act: _Act, tell: Progress) -> builtins.list[int]:
    """``act`` on ``ids`` a batch at a time; what it handled, in id order (as one call of the
    store's requeue gives them)."""
    handled: list[int] = []
    for start in range(0, len(ids), _BATCH):
        done = await act(ids[start : start + _BATCH])
        handled.extend(done)
        tell(len(done))
    return sorted(set(handled))  # a revived parent may come back in two batches' answers


def kinds(kind: str | None, run_filter: bool, subscription: str | None) -> tuple[bool, bool]:
    """Which kinds to list, (runs, deliveries): ``kind`` (``runs``, ``deliveries`` or None for
    both), narrowed by the filters given, which only one kind has."""
    # The singular (a dead letter's own kind: run, delivery) is taken as well as the plural.
    kind = _PLURAL.get(kind, kind) if isinstance(kind, str) else kind
    if kind is not None and kind not in (*KINDS, "all"):
        raise InvalidArgumentError(
            f"kind must be runs, deliveries or all, got {shorten(kind)}", field="kind"
        )
    if run_filter and subscription is not None:
        raise InvalidArgumentError(
            "task and queue select dead runs, subscription dead deliveries: not both",
            field="subscription",
        )
    if kind is None or kind == "all":
        return (subscription is None, not run_filter)
    if (kind == "deliveries" and run_filter) or (kind == "runs" and subscription is not None):
        raise InvalidArgumentError(f"kind {kind} does not go with that filter", field="kind")
    return (kind == "runs", kind == "deliveries")


def _merge(
    runs: Sequence[Run],
    deliveries: Sequence[Delivery],
    limit: int,
    position: dict[str, int],
    want_runs: bool,
    want_deliveries: bool,
) -> Page[DeadLetter]:
    """Up to ``limit`` dead letters from two streams (each newest id first), taken by the time
    they died; the cursor says how far each stream went (0: it is done)."""
    items: list[DeadLetter] = []
    r = d = 0
    while len(items) < limit and (r < len(runs) or d < len(deliveries)):
        take_run = d >= len(deliveries) or (
            r < len(runs) and died_at(runs[r]) >= died_at(deliveries[d])
        )
        if take_run:
            run = runs[r]
            items.append(
                DeadLetter(kind=DeadLetterKind.RUN, id=run.id, died_at=died_at(run), run=run)
            )
            r += 1
        else:
            delivery = deliveries[d]
            items.append(
                DeadLetter(
                    kind=DeadLetterKind.DELIVERY,
                    id=delivery.id,
                    died_at=died_at(delivery),
                    delivery=delivery,
                )
            )
            d += 1
    more = r < len(runs) or d < len(deliveries)
    if not more:
        return Page(items=items, next=None)
    run_at = _stream_end(runs, r, position["r"], want_runs)
    delivery_at = _stream_end(deliveries, d, position["d"], want_deliveries)
    return Page(items=items, next=encode_cursor({"r": run_at, "d": delivery_at}))


def _stream_end(
    found: Sequence[Run] | Sequence[Delivery], taken: int, was: int, wanted: bool
) -> int:
    """Where a stream goes on: below the last id taken, where it was if none was taken, 0 if
    it is done (nothing left of it, or not listed)."""
    if not wanted or (taken == len(found)):
        return 0
    return found[taken - 1].id if taken else was
