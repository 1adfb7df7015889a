"""The "ended" wake-up channel (what ``handle.wait()`` listens on), on every store: a run's end
wakes its listeners in other processes (another store object here), whatever ended it; a new
run does not; and a closed listener is no longer nudged."""

from __future__ import annotations

from contract.test_store import T0, failed, new, ok, request
from cronbus.store import Store, open_store
from cronbus.store.wake import ENDED_CHANNEL


async def test_a_run_ending_wakes_ended_listeners_of_other_processes(store: Store) -> None:
    other = open_store(store.url)
    await other.open()
    try:
        listener = await store.listen([ENDED_CHANNEL])
        await other.defer([new()], T0)
        assert await listener.wait(0.2) is False  # a new run is no end
        (claimed,) = await other.claim(request(("q", 1)), T0)
        assert await listener.wait(0.2) is False  # nor is a claim
        assert await other.complete([ok(claimed)], T0 + 1) == [True]
        assert await listener.wait(10) is True
        # A failure with no retry left ends the run dead.
        await other.defer([new(max_attempts=1)], T0)
        (claimed,) = await other.claim(request(("q", 1)), T0 + 2)
        await other.complete([failed(claimed)], T0 + 3)
        assert await listener.wait(10) is True
        # A cancel of a waiting run ends it.
        (waiting,) = await other.defer([new(eta=T0 + 3600)], T0)
        await other.cancel(waiting.id, T0 + 4)
        assert await listener.wait(10) is True
        await listener.close()
    finally:
        await other.close()


async def test_a_closed_ended_listener_is_not_nudged_and_others_still_are(store: Store) -> None:
    other = open_store(store.url)
    await other.open()
    try:
        first = await store.listen([ENDED_CHANNEL])
        await first.close()
        second = await store.listen([ENDED_CHANNEL])
        (waiting,) = await other.defer([new(eta=T0 + 3600)], T0)
        await other.cancel(waiting.id, T0 + 1)
        assert await second.wait(10) is True
        assert await first.wait(0.2) is False
        await second.close()
    finally:
        await other.close()
