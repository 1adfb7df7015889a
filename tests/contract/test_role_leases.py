"""Role leases and snapshots (both stores): one holder at a time, renewal, expiry, release,
and a race between many takers that exactly one wins."""

from __future__ import annotations

import asyncio

from cronbus.store import Store

T0 = 1_700_000_000.0


async def test_a_free_lease_is_taken_and_renewed_by_its_holder(store: Store) -> None:
    assert await store.hold_lease("retention", "a", T0, 10)
    assert await store.hold_lease("retention", "a", T0 + 5, 10)
    assert await store.lease_holder("retention", T0 + 14) == "a"


async def test_a_held_lease_is_refused_to_others_until_it_runs_out(store: Store) -> None:
    assert await store.hold_lease("alerts", "a", T0, 10)
    assert not await store.hold_lease("alerts", "b", T0 + 9.9, 10)
    assert await store.lease_holder("alerts", T0 + 9.9) == "a"
    assert await store.hold_lease("alerts", "b", T0 + 10, 10)
    assert await store.lease_holder("alerts", T0 + 10) == "b"
    # The old holder, back late, cannot renew what it lost.
    assert not await store.hold_lease("alerts", "a", T0 + 11, 10)


async def test_leases_of_other_names_are_independent(store: Store) -> None:
    assert await store.hold_lease("alerts", "a", T0, 10)
    assert await store.hold_lease("retention", "b", T0, 10)
    assert await store.lease_holder("alerts", T0) == "a"
    assert await store.lease_holder("retention", T0) == "b"


async def test_release_frees_the_lease_for_others_at_once(store: Store) -> None:
    assert await store.hold_lease("alerts", "a", T0, 60)
    await store.release_lease("alerts", "b")  # not b's: nothing happens
    assert await store.lease_holder("alerts", T0) == "a"
    await store.release_lease("alerts", "a")
    assert await store.lease_holder("alerts", T0) is None
    assert await store.hold_lease("alerts", "b", T0 + 1, 60)


async def test_an_expired_lease_has_no_holder(store: Store) -> None:
    assert await store.lease_holder("alerts", T0) is None
    assert await store.hold_lease("alerts", "a", T0, 10)
    assert await store.lease_holder("alerts", T0 + 10) is None


async def test_concurrent_takers_leave_exactly_one_holder(store: Store) -> None:
    won = await asyncio.gather(*(store.hold_lease("aggregate", f"p{i}", T0, 30) for i in range(16)))
    assert won.count(True) == 1
    assert await store.lease_holder("aggregate", T0) == f"p{won.index(True)}"


async def test_snapshots_are_replaced_and_read_back(store: Store) -> None:
    assert await store.get_snapshot("overview:default") is None
    await store.put_snapshot("overview:default", '{"queues": 1}', T0)
    await store.put_snapshot("overview:default", '{"queues": 2}', T0 + 3)
    await store.put_snapshot("overview:other", "{}", T0)
    assert await store.get_snapshot("overview:default") == (T0 + 3, '{"queues": 2}')
    assert await store.get_snapshot("overview:other") == (T0, "{}")
