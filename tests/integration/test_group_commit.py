"""Group commit (both stores): single defers made at the same time share transactions, each
returns only when its run is durable, and a run the store refuses fails alone."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from cronbus import App
from cronbus.store import Store, open_store

CALLERS = 32


@pytest.fixture
async def app(store: Store) -> App:
    """An app on the tier's store (its own connections, the same data)."""
    app = App(store=store.url)

    @app.task(queue="mail", name="send")
    def send(to: str) -> None:
        """Never executed here."""

    return app


async def test_concurrent_defers_share_transactions_and_are_durable(app: App) -> None:
    async with app:
        send = app.tasks["send"]
        handles = await asyncio.gather(*(send.defer_async(f"u{i}") for i in range(CALLERS)))
        ids = [h.id for h in handles]
    assert len(set(ids)) == CALLERS
    # Read back through a store of its own: every run is there, with its own arguments.
    other = open_store(app.store_url)
    await other.open(create=False)
    try:
        runs = await other.get_runs(ids)
    finally:
        await other.close()
    assert sorted(r.id for r in runs) == sorted(ids)
    assert {r.args[0] for r in runs} == {f"u{i}" for i in range(CALLERS)}
    # Runs written in one transaction share its time: far fewer times than runs.
    assert len({r.created_at for r in runs}) < CALLERS / 4


async def test_a_lone_defer_is_written_at_once(app: App) -> None:
    async with app:
        send = app.tasks["send"]
        first = await send.defer_async("a")
        second = await send.defer_async("b")
        runs = await app.store.get_runs([first.id, second.id])
    assert [r.args for r in sorted(runs, key=lambda r: r.id)] == [["a"], ["b"]]


async def test_a_refused_run_fails_alone(app: App) -> None:
    async with app:
        send = app.tasks["send"]
        good = send.prepare(("ok",), {}, now=app.clock.now())
        # Past the 64-bit columns both stores keep priorities in: the store refuses it.
        bad = dataclasses.replace(good, priority=2**70)
        results = await asyncio.gather(
            app.defers.defer(good),
            app.defers.defer(bad),
            app.defers.defer(good),
            return_exceptions=True,
        )
        assert isinstance(results[1], Exception)
        created = [r for r in results if not isinstance(r, BaseException)]
        assert len(created) == 2
        runs = await app.store.get_runs([d.id for d in created])
    assert [r.args for r in runs] == [["ok"], ["ok"]]


def test_threads_deferring_at_once_each_get_their_run(app: App) -> None:
    ids: list[int] = []
    lock = threading.Lock()
    with app:
        send = app.tasks["send"]

        def caller(n: int) -> None:
            for i in range(10):
                handle = send.defer(f"{n}-{i}")
                with lock:
                    ids.append(handle.id)

        threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        runs = app.blocking(app.store.get_runs(ids))
    assert len(set(ids)) == 80
    assert len(runs) == 80
