"""Routing: which live worker a run goes to.

A run's ``route`` is a :class:`Strategy`. With ``any`` (the default) every eligible worker may
claim the run from the shared queue. For the :data:`TARGETED` strategies the store picks a
``target_worker`` when it inserts the run (and again when that worker dies, on reroute), with
:func:`assign_targets`, among the :func:`eligible` live workers; only that worker then claims
it. When no worker is eligible the target stays None and any worker that becomes eligible
claims the run: routing never loses a run, it only steers it.

``route_labels`` narrow the candidates of every strategy (``labels`` is ``any`` among the
workers carrying them). ``pinned`` is for broadcast children: the target is fixed at creation
and never changed (a child whose worker left ends ``dead``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import random
from collections.abc import Mapping, Sequence

from ..errors import InvalidArgumentError
from ..fairness import serves
from ..model import NewRun
from ..validation import check_label, shorten

LABEL_PREFIX = "label:"
"""A failover entry starting with this names a label rather than a worker id."""
TURN_WRAP = 2**31
"""Round-robin turns wrap here, so the stored turn always fits a 32-bit INTEGER column."""


class Strategy(enum.StrEnum):
    """How a run picks its worker."""

    ANY = "any"
    """Any eligible worker claims it from the shared queue (the default)."""
    ROUND_ROBIN = "round_robin"
    """Eligible workers in turn (by id), the turn kept per (namespace, task)."""
    RANDOM = "random"
    """An eligible worker drawn at random."""
    HASH = "hash"
    """Rendezvous hashing of ``route_key``: the same key goes to the same worker while it
    lives, and adding a worker moves only the keys it wins."""
    LEAST_BUSY = "least_busy"
    """The eligible worker with the fewest running runs and runs waiting for it."""
    FAILOVER = "failover"
    """The first entry of ``route_order`` (worker id or ``label:<name>``) with a live worker."""
    LABELS = "labels"
    """Any worker that carries all of ``route_labels`` claims it."""
    PINNED = "pinned"
    """A broadcast child: its target is set at creation and never moves."""


TARGETED: frozenset[Strategy] = frozenset(
    {
        Strategy.ROUND_ROBIN,
        Strategy.RANDOM,
        Strategy.HASH,
        Strategy.LEAST_BUSY,
        Strategy.FAILOVER,
    }
)
"""The strategies for which the store picks ``target_worker`` when it inserts (or reroutes)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LiveWorker:
    """A live worker as routing sees it (registry row alive within its lease)."""

    id: str
    namespace: str
    queues: tuple[str, ...]
    labels: frozenset[str]
    tasks: frozenset[str]
    load: int = 0
    """Its running runs plus the waiting runs targeted at it (read only for ``least_busy``)."""


def check_route(
    route: object,
    *,
    route_key: object = None,
    labels: Sequence[str] | None = None,
    failover: Sequence[str] | None = None,
    field: str = "route",
) -> Strategy:
    """Validate a route chosen by a user (task option, ``using``, API) and return its strategy.

    ``route_key`` is whatever names the hash key (an argument name or a callable): only its
    presence is checked. Raises :class:`~cronbus.errors.InvalidArgumentError` naming the field
    at fault: an unknown strategy or ``pinned`` (``field``), ``hash`` without ``route_key``
    (``route_key``), ``failover`` without entries (``failover``), ``labels`` without labels
    (``labels``), and a bad label name or failover entry.
    """
    strategy = _strategy(route, field)
    if strategy is Strategy.PINNED:
        raise InvalidArgumentError(
            "route='pinned' is set by broadcast for its children; use broadcast=True instead",
            field=field,
        )
    names = check_labels(labels)
    entries = check_failover(failover)
    if strategy is Strategy.HASH and route_key is None:
        raise InvalidArgumentError(
            "route='hash' needs route_key= (an argument name, or a callable that returns the key)",
            field="route_key",
        )
    if strategy is Strategy.FAILOVER and not entries:
        raise InvalidArgumentError(
            "route='failover' needs failover=[...] (worker ids or 'label:<name>' entries)",
            field="failover",
        )
    if strategy is Strategy.LABELS and not names:
        raise InvalidArgumentError(
            "route='labels' needs labels=[...] (the labels a worker must carry)", field="labels"
        )
    return strategy


def check_labels(labels: Sequence[str] | None, field: str = "labels") -> tuple[str, ...]:
    """Validate label names (as :func:`~cronbus.validation.check_label`); duplicates dropped,
    order kept. A bare string is refused: ``labels="gpu"`` would mean three one-letter labels."""
    if labels is None:
        return ()
    if isinstance(labels, str | bytes):
        raise InvalidArgumentError(
            f"{field} must be a list of label names, like ['gpu'], got {shorten(labels)}",
            field=field,
        )
    return tuple(dict.fromkeys(_label(name, field) for name in labels))


def check_failover(entries: Sequence[str] | None, field: str = "failover") -> tuple[str, ...]:
    """Validate failover entries: worker ids or ``label:<name>``; duplicates dropped, order
    kept (a repeated entry could never win the second time)."""
    if entries is None:
        return ()
    if isinstance(entries, str | bytes):
        raise InvalidArgumentError(
            f"{field} must be a list of worker ids or 'label:<name>' entries, got "
            f"{shorten(entries)}",
            field=field,
        )
    checked = []
    for entry in entries:
        text = _label(entry, field)
        if text.startswith(LABEL_PREFIX):
            _label(text[len(LABEL_PREFIX) :], field)
        checked.append(text)
    return tuple(dict.fromkeys(checked))


def eligible(run: NewRun, workers: Sequence[LiveWorker]) -> list[LiveWorker]:
    """The workers that may run ``run``: of its namespace, knowing its task, serving its queue
    and carrying all its ``route_labels``; sorted by id (round robin and failover rely on it)."""
    return eligible_with_labels(run, run.route_labels, workers)


def rendezvous(key: str, ids: Sequence[str]) -> str | None:
    """The id with the highest hash of (id, key): highest random weight hashing.

    Each key ranks every worker independently, so adding a worker moves only the keys the new
    worker now wins (about 1/n of them) and removing one moves only its own keys. blake2b, not
    ``hash()``, so every process and machine agrees.
    """
    if not ids:
        return None
    return max(ids, key=lambda worker: (_weight(key, worker), worker))


def choose(
    strategy: Strategy,
    candidates: Sequence[LiveWorker],
    *,
    key: str | None,
    order: Sequence[str],
    turn: int,
    rng: random.Random,
) -> str | None:
    """The id of the worker to target among ``candidates`` (eligible workers), or None.

    None when there are no candidates, for strategies without a target (``any``, ``labels``,
    ``pinned``) and for ``failover`` when no entry has a candidate. ``key`` None hashes as
    ``""`` (the edge refuses ``hash`` without a key). ``turn`` is the round-robin turn.
    """
    if not candidates:
        return None
    ordered = sorted(candidates, key=lambda worker: worker.id)
    if strategy is Strategy.ROUND_ROBIN:
        return ordered[turn % len(ordered)].id
    if strategy is Strategy.RANDOM:
        return rng.choice(ordered).id
    if strategy is Strategy.HASH:
        return rendezvous(key or "", [worker.id for worker in ordered])
    if strategy is Strategy.LEAST_BUSY:
        return min(ordered, key=lambda worker: (worker.load, worker.id)).id
    if strategy is Strategy.FAILOVER:
        return _first_alive(order, ordered)
    return None


def assign_targets(
    runs: Sequence[NewRun],
    workers: Sequence[LiveWorker],
    turns: Mapping[tuple[str, str], int],
    rng: random.Random | None = None,
) -> tuple[list[NewRun], dict[tuple[str, str], int]]:
    """Pick ``target_worker`` for the runs of a :data:`TARGETED` strategy that have none.

    Other runs come back unchanged (same objects), in the same order. ``turns`` are the stored
    round-robin turns per (namespace, task); the second value returned holds the new turn of
    every (namespace, task) that advanced, to write back. ``least_busy`` adds each of its own
    picks to the worker's load, so a batch spreads instead of piling on one worker.
    """
    draw = rng if rng is not None else random.Random()
    loads = {worker.id: worker.load for worker in workers}
    advanced: dict[tuple[str, str], int] = {}
    out: list[NewRun] = []
    for run in runs:
        strategy = _strategy(run.route, "route")
        if strategy not in TARGETED or run.target_worker is not None:
            out.append(run)
            continue
        candidates = eligible(run, workers)
        if strategy is Strategy.LEAST_BUSY:
            candidates = [dataclasses.replace(w, load=loads[w.id]) for w in candidates]
        cursor = (run.namespace, run.task)
        turn = advanced.get(cursor, turns.get(cursor, 0))
        target = choose(
            strategy, candidates, key=run.route_key, order=run.route_order, turn=turn, rng=draw
        )
        if target is None:
            out.append(run)
            continue
        if strategy is Strategy.ROUND_ROBIN:
            advanced[cursor] = (turn + 1) % TURN_WRAP
        loads[target] += 1
        out.append(dataclasses.replace(run, target_worker=target))
    return out, advanced


def needs_workers(runs: Sequence[NewRun]) -> bool:
    """Whether inserting ``runs`` needs the live workers: a targeted run without a target, or
    a fan-out to expand. Lets the store skip the registry read for plain runs."""
    return any(
        run.fanout is not None or (run.target_worker is None and _targeted(run)) for run in runs
    )


def needs_load(runs: Sequence[NewRun]) -> bool:
    """Whether inserting ``runs`` needs the workers' loads: a ``least_busy`` run to target."""
    return any(run.route == Strategy.LEAST_BUSY and run.target_worker is None for run in runs)


def eligible_with_labels(
    run: NewRun, labels: Sequence[str], workers: Sequence[LiveWorker]
) -> list[LiveWorker]:
    """The workers of ``run``'s namespace that know its task, serve its queue and carry
    ``labels``, sorted by id (shared by :func:`eligible` and broadcast expansion)."""
    need = frozenset(labels)
    found = [
        worker
        for worker in workers
        if worker.namespace == run.namespace
        and run.task in worker.tasks
        and serves(worker.queues, run.queue)
        and need <= worker.labels
    ]
    return sorted(found, key=lambda worker: worker.id)


def _first_alive(order: Sequence[str], ordered: Sequence[LiveWorker]) -> str | None:
    """The first failover entry with a candidate; for a label, the smallest id carrying it."""
    by_id = {worker.id: worker for worker in ordered}
    for entry in order:
        if entry.startswith(LABEL_PREFIX):
            label = entry[len(LABEL_PREFIX) :]
            for worker in ordered:
                if label in worker.labels:
                    return worker.id
        elif entry in by_id:
            return entry
    return None


def _weight(key: str, worker: str) -> int:
    """The rendezvous weight of ``worker`` for ``key``; the NUL keeps ("ab","c") from
    colliding with ("a","bc")."""
    digest = hashlib.blake2b(f"{worker}\x00{key}".encode(errors="surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big")


def _strategy(route: object, field: str) -> Strategy:
    """The strategy named ``route``, refusing unknown names (the error lists the names a user
    may give, hence without ``pinned``)."""
    try:
        strategy = Strategy(route if isinstance(route, str) else "")
    except ValueError:
        choices = ", ".join(s.value for s in Strategy if s is not Strategy.PINNED)
        raise InvalidArgumentError(
            f"{field} must be one of {choices}, got {shorten(route)}", field=field
        ) from None
    return strategy


def _targeted(run: NewRun) -> bool:
    """Whether the run's strategy is one the store targets (unknown names are not)."""
    return run.route in TARGETED


def _label(value: object, field: str) -> str:
    """One label name or failover entry, with the field named on the error."""
    try:
        return check_label(value, field)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(str(error), field=field) from None
