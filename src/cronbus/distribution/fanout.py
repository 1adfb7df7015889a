"""Fan-out: a parent run's children, its reduce run, and when the parent is done.

A broadcast or shards parent is expanded by the store when it inserts the parent
(:func:`expand`); a running task makes map children with ``ctx.map`` (:func:`map_children`),
with an optional reduce run made when every child succeeded (:func:`encode_reduce`,
:func:`reduce_run`). The parent's counters say what happens next (:func:`settle`).

Children never carry what makes the parent unique or scheduled (idempotency key, job and fire
time, overlap key) nor the fan-out itself: they are plain runs that know their parent.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Sequence
from typing import Any

from ..model import Children, ErrorInfo, FanOutKind, NewRun, Overlap
from ..states import RunState
from .routing import LiveWorker, Strategy, eligible_with_labels

_REDUCE_FIELDS = (
    "task",
    "queue",
    "priority",
    "max_attempts",
    "timeout",
    "namespace",
    "route",
    "route_key",
    "route_labels",
    "route_order",
    "limit_key",
    "limit_max",
    "rate_key",
    "rate_max",
    "rate_period",
)
"""The NewRun fields a reduce template keeps: all but the arguments, time and identity."""
_TUPLES = frozenset({"route_labels", "route_order"})


class Settle(enum.StrEnum):
    """What a fan-out parent does when one of its children ends."""

    WAIT = "wait"
    """Children are still going."""
    REDUCE = "reduce"
    """Every child succeeded: create the reduce run, then wait for it."""
    SUCCEED = "succeed"
    """Every child succeeded (and the reduce run, if any): the parent succeeds."""
    FAIL = "fail"
    """A child did not succeed: the parent ends dead."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """A parent's counters (its ``fanouts`` row)."""

    total: int
    ended: int
    succeeded: int
    has_reduce: bool
    reduce_run: int | None


def expand(parent_id: int, parent: NewRun, workers: Sequence[LiveWorker]) -> list[NewRun]:
    """The children of a broadcast or shards parent, created with it (a broadcast's may come
    later: see :func:`pending`).

    Broadcast: one child per live worker of the parent's namespace that knows the task, serves
    the queue and carries the route labels and the broadcast's labels, in id order, pinned to
    it (``child_index`` = ordinal). None when no worker qualifies: the parent then waits for
    one (:func:`pending`), and ends dead with :func:`no_worker_error` if none comes. Shards:
    ``fanout.shards`` children, ``child_index`` 0..N-1 and ``shard_total`` N, keeping the
    parent's route and limits (targets are assigned afterwards as for any run). A parent
    without a fan-out, or a map, expands to nothing.
    """
    fan = parent.fanout
    if fan is None or fan.kind is FanOutKind.MAP:
        return []
    base = _child(parent, parent_id)
    if fan.kind is FanOutKind.SHARDS:
        return [
            dataclasses.replace(base, child_index=index, shard_total=fan.shards)
            for index in range(fan.shards)
        ]
    labels = tuple(dict.fromkeys((*parent.route_labels, *fan.labels)))
    return [
        dataclasses.replace(
            base,
            route=Strategy.PINNED.value,
            route_key=None,
            route_order=(),
            route_labels=labels,
            target_worker=worker.id,
            child_index=index,
        )
        for index, worker in enumerate(eligible_with_labels(parent, labels, workers))
    ]


def map_children(
    parent_id: int, template: NewRun, start_index: int, calls: Sequence[tuple[str, str]]
) -> list[NewRun]:
    """Map children from ``template`` (the child task's run, as ``defer`` would make it), one
    per ``(args_json, kwargs_json)`` of ``calls``, with ``child_index = start_index + i``."""
    base = _child(template, parent_id)
    return [
        dataclasses.replace(base, args_json=args, kwargs_json=kwargs, child_index=start_index + i)
        for i, (args, kwargs) in enumerate(calls)
    ]


def encode_reduce(template: NewRun) -> str:
    """The reduce run's template as JSON text (``fanouts.reduce_spec``): the fields to make
    it again once the children are done, without arguments, eta or identity."""
    body = {name: getattr(template, name) for name in _REDUCE_FIELDS}
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def reduce_run(spec: str, parent_id: int, results: Sequence[str | None], now: float) -> NewRun:
    """The reduce run of parent ``parent_id`` from its ``spec`` (:func:`encode_reduce`).

    Its one positional argument is the list of the children's results in ``child_index``
    order: ``args_json`` is ``[[r0,r1,...]]`` built from the stored result JSON texts as they
    are (``null`` for None), so no result is decoded and encoded again. It is due at ``now``
    (the time of the transaction that ends the last child) and has no ``child_index``.
    """
    body: dict[str, Any] = json.loads(spec)
    fields = {name: body[name] for name in _REDUCE_FIELDS if name in body}
    for name in _TUPLES & fields.keys():
        fields[name] = tuple(fields[name])
    items = ",".join("null" if result is None else result for result in results)
    return NewRun(
        **fields, args_json=f"[[{items}]]", kwargs_json="{}", eta=now, parent_id=parent_id
    )


def settle(tally: Tally) -> Settle:
    """What the parent does now: WAIT while children are going, FAIL when one did not
    succeed, REDUCE when all did and a reduce run is still to make, else SUCCEED."""
    if tally.ended < tally.total:
        return Settle.WAIT
    if tally.succeeded < tally.total:
        return Settle.FAIL
    if tally.has_reduce and tally.reduce_run is None:
        return Settle.REDUCE
    return Settle.SUCCEED


def after_reduce(reduce_state: RunState) -> Settle:
    """What the parent does when its reduce run ends in ``reduce_state``."""
    return Settle.SUCCEED if reduce_state is RunState.SUCCEEDED else Settle.FAIL


NO_LIVE_WORKER = "NoLiveWorker"
"""The error type of a broadcast parent that no live worker could run."""
NO_WORKER = "-"
"""The worker named by the attempt of a parent no live worker came for (there was none)."""


class Pending(enum.StrEnum):
    """What a waiting broadcast parent without children does now (:func:`pending`)."""

    EXPAND = "expand"
    """Live workers serve it now: make their children."""
    WAIT = "wait"
    """None yet, and its wait is not over."""
    GIVE_UP = "give_up"
    """None came within the wait: the parent ends dead (:func:`no_worker_error`)."""


def pending(children: int, since: float, now: float, wait: float) -> Pending:
    """A waiting broadcast parent's next step: ``children`` it would have now (one per
    eligible live worker), and its ``wait`` (seconds from ``since``: its creation, or the
    requeue that revived it) for the first."""
    if children:
        return Pending.EXPAND
    return Pending.GIVE_UP if now >= since + wait else Pending.WAIT


def with_broadcast_labels(run: NewRun) -> NewRun:
    """A broadcast parent as stored: its broadcast's labels among its route labels, so that a
    parent that waits for workers is expanded later from its row alone (its children carry
    the same labels either way: :func:`expand` takes both)."""
    fan = run.fanout
    if fan is None or fan.kind is not FanOutKind.BROADCAST or not fan.labels:
        return run
    labels = tuple(dict.fromkeys((*run.route_labels, *fan.labels)))
    return dataclasses.replace(run, route_labels=labels, fanout=dataclasses.replace(fan, labels=()))


def no_worker_note(task: str, queue: str, waited: float) -> str:
    """Why a broadcast parent ended without children: no live worker came within its wait."""
    return f"no live worker serves task {task} on queue {queue} (waited {waited:.3g} s)"


def no_worker_error(task: str, queue: str, waited: float) -> ErrorInfo:
    """The error a broadcast parent ends dead with when no live worker came (its attempt)."""
    return ErrorInfo(type=NO_LIVE_WORKER, message=no_worker_note(task, queue, waited))


def summary(children: Children) -> str:
    """One line on a parent's children, for ``runs show`` and logs:
    ``"3 of 4 children succeeded (shards)"``, or how many ended while some are going."""
    if children.total == 0:
        return f"no children ({children.kind}){': ' + children.note if children.note else ''}"
    noun = "child" if children.total == 1 else "children"
    if children.ended < children.total:
        text = (
            f"{children.ended} of {children.total} {noun} ended, "
            f"{children.succeeded} succeeded ({children.kind})"
        )
    else:
        text = f"{children.succeeded} of {children.total} {noun} succeeded ({children.kind})"
    if children.reduce_run_id is not None:
        text += f"; reduce run {children.reduce_run_id}"
    return text


def _child(parent: NewRun, parent_id: int) -> NewRun:
    """``parent`` as a child of ``parent_id``: without what makes the parent unique (key, job,
    fire time), its overlap policy (a child never skips or replaces a sibling), its fan-out,
    or a target (chosen per child)."""
    return dataclasses.replace(
        parent,
        fanout=None,
        parent_id=parent_id,
        child_index=None,
        shard_total=None,
        idempotency_key=None,
        job_id=None,
        fire_at=None,
        concurrency_key=None,
        overlap=Overlap.ALLOW,
        target_worker=None,
    )
