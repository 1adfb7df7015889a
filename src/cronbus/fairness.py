"""Sharing one claim batch among the queues a worker serves.

A worker serves several queues, each with a weight (``"emails,reports:3"``). When it has
``limit`` free slots it asks the store for runs, and :func:`plan_shares` says how many to take
from each queue, so that a busy queue cannot starve the others (isolation, invariant 5):

* when there are at least as many slots as queues, every queue gets one slot and the slots are
  split in proportion to the weights (largest remainder, exact integer arithmetic);
* when there are fewer slots than queues, one slot goes to each of ``limit`` queues, and the
  window of served queues moves with ``rotation`` so that every queue is served within
  ``len(queues)`` consecutive claims.

The plan is listed starting at ``rotation % len(queues)``: ties go to the queues that come first,
and a store that hands a queue's unused slots to the queues after it spreads them fairly too.

The spec ``"*"`` (:data:`EVERY_QUEUE`) asks for every queue: the worker then shares each claim
among the queues that hold claimable runs at the time, each with weight 1, read from the store.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Collection, Mapping, Sequence

from .errors import ConfigurationError
from .model import QueueShare
from .validation import shorten

QUEUE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
MAX_QUEUE_NAME = 100
_WEIGHT = re.compile(r"[0-9]+")

Queues = tuple[tuple[str, int], ...]

EVERY_QUEUE = "*"
"""The queue spec of a worker that serves every queue (``*`` is not a valid queue name), and
what the worker registry lists as its queues."""
EVERY = ((EVERY_QUEUE, 1),)
"""What :func:`parse_queues` returns for :data:`EVERY_QUEUE`."""


def parse_queues(spec: str | Sequence[str]) -> Queues:
    """Parse ``"a,b:3,c"`` (or ``["a", "b:3", "c"]``) into ``(("a", 1), ("b", 3), ("c", 1))``.

    A weight follows a colon and defaults to 1. Items of a sequence may hold commas too, so a
    repeated command-line option and a comma-separated one read the same. ``"*"`` alone means
    every queue and gives :data:`EVERY`. Raises :class:`~cronbus.errors.ConfigurationError` on
    an empty, malformed or repeated name, on a weight that is not a whole number >= 1, and on
    ``*`` listed with other queues or with a weight.
    """
    items = _split(spec)
    if any(item.strip().startswith(EVERY_QUEUE) for item in items):
        return _every(items, spec)
    queues: list[tuple[str, int]] = []
    seen: set[str] = set()
    for item in items:
        name, weight = _parse_item(item.strip())
        if name in seen:
            raise ConfigurationError(f"queue {name!r} is listed twice in {_show(spec)}")
        seen.add(name)
        queues.append((name, weight))
    return tuple(queues)


def serves_every_queue(queues: Queues) -> bool:
    """Whether ``queues`` (from :func:`parse_queues`) means every queue."""
    return queues == EVERY


def serves(registered: Sequence[str], queue: str) -> bool:
    """Whether a worker registered with the queues ``registered`` serves ``queue``."""
    return EVERY_QUEUE in registered or queue in registered


def _every(items: list[str], spec: str | Sequence[str]) -> Queues:
    """``*`` alone, or an error that says how to write it."""
    if [item.strip() for item in items] != [EVERY_QUEUE]:
        raise ConfigurationError(
            f"'*' (every queue) cannot be weighted or listed with other queues in {_show(spec)};"
            " give '*' alone, or list the queues"
        )
    return EVERY


def plan_shares(
    queues: Sequence[tuple[str, int]], limit: int, rotation: int
) -> list[tuple[str, int]]:
    """Split ``limit`` claim slots among weighted ``queues``; the shares sum to ``limit``.

    ``rotation`` is a counter the worker increments on every claim. The result lists only the
    queues with at least one slot, starting at ``rotation % len(queues)``. Raises ``ValueError``
    on a negative ``limit``, no queues, a weight below 1 or a repeated name: these are bugs in
    the caller, since :func:`parse_queues` refuses them at the edge.
    """
    _check_plan(queues, limit)
    if limit == 0:
        return []
    ordered = _rotate(queues, rotation)
    if limit < len(ordered):
        return [(name, 1) for name, _ in ordered[:limit]]
    shares = _apportion(ordered, limit)
    return [(name, shares[name]) for name, _ in ordered]


def plan_slots(
    queues: Sequence[tuple[str, int]],
    concurrency: int,
    busy: Mapping[str, int],
    rotation: int,
    others: Collection[str] = (),
) -> list[QueueShare]:
    """Share a worker's free slots among weighted ``queues``, counting what already runs.

    ``busy`` counts the runs executing on the worker per queue; the free slots are
    ``concurrency`` minus their sum. Each queue's quota is its weighted share of
    ``concurrency`` (at least 1). Free slots go first to the queues below their quota (the
    least served for their weight first), then by weight. No queue may hold more than
    ``concurrency`` minus one slot for every other known queue (the served ``queues``,
    ``others`` and the busy ones; a busy one keeps what it holds): so a long batch on one queue
    never takes the slot another queue's next run needs. When ``concurrency`` is below the
    number of known queues that bound would be zero; a queue may then still hold one slot.

    Ties go to the queue that comes first from ``rotation % len(queues)``. Only queues with a
    slot are listed; ``limit`` is the queue's share and ``most`` the most the claim may take
    from it once the store hands on unused shares. The limits sum to at most the free slots.
    Raises ``ValueError`` on arguments :func:`parse_queues` never produces (a caller bug).
    """
    _check_plan(queues, concurrency)
    free = concurrency - sum(busy.values())
    if free <= 0:
        return []
    ordered = _rotate(queues, rotation)
    held = {name: busy.get(name, 0) for name, _ in ordered}
    caps = _caps(ordered, concurrency, busy, others)
    quotas = _quotas(ordered, concurrency)
    given = dict.fromkeys(held, 0)
    # Below quota, the quotas weigh: with fewer slots than queues every quota is one, so the
    # rotation (not the weights) picks who is served and no queue waits more than a round.
    below = {name: min(quotas[name], caps[name]) for name in held}
    left = _fill(ordered, quotas, held, given, below, free)
    _fill(ordered, dict(ordered), held, given, caps, left)
    return [
        QueueShare(name=name, limit=given[name], most=min(free, caps[name] - busy.get(name, 0)))
        for name, _ in ordered
        if given[name]
    ]


def spare_shares(
    queues: Sequence[tuple[str, int]],
    concurrency: int,
    busy: Mapping[str, int],
    planned: Sequence[QueueShare],
    others: Collection[str] = (),
) -> list[QueueShare]:
    """Queues :func:`plan_slots` gave no slot although they have room below their bound: each
    with ``limit`` 0 and ``most`` its room, so the store may hand them shares the planned
    queues leave unused (a queue kept waiting while the slots went to an empty one). Without
    them, a queue at its quota could never take its last allowed slot while another served
    queue had none to run."""
    free = concurrency - sum(busy.values())
    if free <= 0:
        return []
    listed = {share.name for share in planned}
    ordered = list(queues)
    caps = _caps(ordered, concurrency, busy, others)
    spare = []
    for name, _ in ordered:
        room = min(free, caps[name] - busy.get(name, 0))
        if name not in listed and room > 0:
            spare.append(QueueShare(name=name, limit=0, most=room))
    return spare


def _caps(
    ordered: list[tuple[str, int]],
    concurrency: int,
    busy: Mapping[str, int],
    others: Collection[str],
) -> dict[str, int]:
    """The most each queue may hold: one slot (or what it holds) kept for every other one."""
    known = {name for name, _ in ordered} | set(others) | {q for q, n in busy.items() if n > 0}
    kept = {name: max(1, busy.get(name, 0)) for name in known}
    total = sum(kept.values())
    return {name: max(1, concurrency - (total - kept[name])) for name, _ in ordered}


def _quotas(ordered: list[tuple[str, int]], concurrency: int) -> dict[str, int]:
    """Each queue's weighted share of the whole worker (at least one slot)."""
    if concurrency < len(ordered):
        return dict.fromkeys((name for name, _ in ordered), 1)
    return _apportion(ordered, concurrency)


def _fill(
    ordered: list[tuple[str, int]],
    weights: Mapping[str, int],
    held: dict[str, int],
    given: dict[str, int],
    bound: Mapping[str, int],
    free: int,
) -> int:
    """Hand out up to ``free`` slots, one at a time, to the queue whose next slot brings it
    least above its weight (D'Hondt), while it holds less than ``bound``; the slots left.
    Ties go to the queue listed first in ``ordered``.

    A heap keeps it O(free log queues): a ``*`` worker may serve many queues. The ratios
    ``(held + 1) / weight`` are compared exactly as integers scaled by the weights' least
    common multiple (``Fraction`` objects cost a gcd and an allocation each, every claim)."""
    if len(ordered) == 1:  # one queue (a common worker): no ratios to compare
        name = ordered[0][0]
        take = min(free, max(0, bound[name] - held[name]))
        held[name] += take
        given[name] += take
        return free - take
    scale = math.lcm(*(weights[name] for name, _ in ordered))
    steps = {name: scale // weights[name] for name, _ in ordered}
    heap = [
        ((held[name] + 1) * steps[name], place, name)
        for place, (name, _) in enumerate(ordered)
        if held[name] < bound[name]
    ]
    heapq.heapify(heap)
    while free and heap:
        _, place, name = heapq.heappop(heap)
        held[name] += 1
        given[name] += 1
        free -= 1
        if held[name] < bound[name]:
            heapq.heappush(heap, ((held[name] + 1) * steps[name], place, name))
    return free


def _split(spec: str | Sequence[str]) -> list[str]:
    """Split a spec into ``name[:weight]`` items, refusing one that names no queue at all."""
    if isinstance(spec, str):
        parts = spec.split(",")
    else:
        parts = []
        for item in spec:
            if not isinstance(item, str):
                raise ConfigurationError(f"queue entries must be strings, got {item!r}")
            parts.extend(item.split(","))
    if not parts or all(not part.strip() for part in parts):
        raise ConfigurationError(f"no queue given in {_show(spec)}; write e.g. 'default,emails:3'")
    return parts


def _parse_item(item: str) -> tuple[str, int]:
    """Parse one ``name`` or ``name:weight``."""
    name, colon, raw_weight = item.partition(":")
    name = name.strip()
    _check_name(name, item)
    weight = _parse_weight(raw_weight.strip(), item) if colon else 1
    return name, weight


def _check_name(name: str, item: str) -> None:
    """Refuse an empty, too long or oddly spelled queue name."""
    if not name:
        raise ConfigurationError(f"empty queue name in {item!r}; check for a stray comma")
    if len(name) > MAX_QUEUE_NAME:
        raise ConfigurationError(
            f"queue name {name[:20]!r}... is {len(name)} characters; the limit is {MAX_QUEUE_NAME}"
        )
    if not QUEUE_NAME.fullmatch(name):
        raise ConfigurationError(
            f"queue name {name!r} may only hold letters, digits, '_', '.' and '-'"
        )


def _parse_weight(raw: str, item: str) -> int:
    """Parse a weight: a whole number >= 1, in ASCII digits."""
    # int() alone would accept "+3", "3_0" and non-ASCII digits; a weight is plainer than that.
    if not _WEIGHT.fullmatch(raw):
        raise ConfigurationError(f"queue weight in {item!r} must be a whole number >= 1")
    try:
        weight = int(raw)
    except ValueError:  # more digits than int() converts
        raise ConfigurationError(f"queue weight in {item[:40]!r} is too large") from None
    if weight < 1:
        raise ConfigurationError(f"queue weight in {item!r} must be >= 1, got {weight}")
    return weight


def _show(spec: str | Sequence[str]) -> str:
    """Render a spec for an error message (at most 80 characters of it)."""
    return shorten(spec if isinstance(spec, str) else ",".join(map(str, spec)))


def _check_plan(queues: Sequence[tuple[str, int]], limit: int) -> None:
    """Refuse arguments that :func:`parse_queues` would never produce."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if not queues:
        raise ValueError("no queues to share the claim among")
    names = [name for name, _ in queues]
    if len(set(names)) != len(names):
        raise ValueError(f"queue names must be unique, got {names}")
    if any(weight < 1 for _, weight in queues):
        raise ValueError(f"queue weights must be >= 1, got {list(queues)}")


def _rotate(queues: Sequence[tuple[str, int]], rotation: int) -> list[tuple[str, int]]:
    """The queues, starting at ``rotation % len(queues)``."""
    start = rotation % len(queues)
    return [*queues[start:], *queues[:start]]


def _apportion(ordered: list[tuple[str, int]], limit: int) -> dict[str, int]:
    """Weighted shares of ``limit >= len(ordered)`` slots, every queue getting at least one.

    A queue whose proportional quota is below one slot gets exactly one; the rest are shared
    again among the others. That can push another queue below one, hence the loop; it ends
    because the remaining quotas always sum to at least the number of remaining queues.
    """
    shares: dict[str, int] = {}
    rest, left = ordered, limit
    while True:
        total = sum(weight for _, weight in rest)
        small = [name for name, weight in rest if left * weight < total]
        if not small:
            break
        shares.update(dict.fromkeys(small, 1))
        rest = [(name, weight) for name, weight in rest if name not in shares]
        left -= len(small)
    shares.update(_largest_remainder(rest, left))
    return shares


def _largest_remainder(ordered: list[tuple[str, int]], limit: int) -> dict[str, int]:
    """Hamilton's method: floors of the exact quotas, then the leftover slots by remainder.

    Integers only, so equal weights always tie exactly; ties go to the queue listed first, which
    the rotation moves from one claim to the next.
    """
    total = sum(weight for _, weight in ordered)
    shares = {name: limit * weight // total for name, weight in ordered}
    leftover = limit - sum(shares.values())
    # sorted() is stable, so among equal remainders the rotated order decides.
    by_remainder = sorted(ordered, key=lambda q: -(limit * q[1] % total))
    for name, _ in by_remainder[:leftover]:
        shares[name] += 1
    return shares
