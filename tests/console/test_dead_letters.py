"""The dead letters page: dead runs and deliveries with their last error, the filter form,
requeue and purge one at a time or every match (a bulk operation for requeue), and errors."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from console.conftest import Console
from console.test_jobs import change_forms, error_of, header_forms, notice, parse
from cronbus.admin_records import OperationState
from cronbus.errors import NotFoundError
from cronbus.events.states import DeliveryState
from cronbus.services import Services
from cronbus.states import AttemptOutcome, RunState
from integration.api_seed import OTHER_NAMESPACE, Seeded, _end, _events


async def dead_run(services: Services, queue: str) -> int:
    """A run of ``boom`` that failed its only attempt: dead (alone in its queue, so the
    claim takes it)."""
    run = (await services.runs.defer("boom", queue=queue)).run
    await _end(services.app, run.id, AttemptOutcome.FAILED)
    assert (await services.app.store.get_run(run.id)).state is RunState.DEAD
    return run.id


async def fill(console: Console) -> tuple[Services, list[int], list[int]]:
    """Three dead runs (queues dl-0, dl-1, dl-2) and the two dead deliveries of the seed's
    ``hook`` subscription; returns the run and delivery ids."""
    services = Services(console.api.app)
    runs = [await dead_run(services, f"dl-{n}") for n in range(3)]
    await services.namespaces.create(OTHER_NAMESPACE)
    seeded = Seeded(admin_token="", admin_token_id="")
    await _events(console.api.app, services, seeded)
    return services, runs, seeded.dead_deliveries


def rows(html: str) -> list[tuple[str, int]]:
    """The (kind, id) of each row of ``#dead-letters``."""
    table = parse(html).by_id("dead-letters")
    return [
        (tr.attrs["data-kind"], int(tr.attrs["data-id"]))
        for tr in table.all("tr")
        if "data-kind" in tr.attrs
    ]


async def test_the_table_lists_dead_runs_and_deliveries_with_their_last_error(
    console: Console,
) -> None:
    _, runs, deliveries = await fill(console)
    browser = await console.login("read", namespaces=["default"])
    try:
        response = await browser.get("/dead-letters")
        assert response.status_code == 200
        listed = rows(response.text)
        assert sorted(listed) == sorted(
            [("run", i) for i in runs] + [("delivery", i) for i in deliveries]
        )
        table = parse(response.text).by_id("dead-letters")
        run = table.one("tr", data_kind="run", data_id=str(runs[0]))
        assert run.one("a").attrs["href"] == f"/runs/{runs[0]}"
        assert "boom" in run.text
        assert "on dl-0" in run.text
        assert run.one(class_="last-error").text == "ValueError: boom"
        assert run.one("time")
        delivery = table.one("tr", data_kind="delivery", data_id=str(deliveries[0]))
        assert delivery.all("a")[0].attrs["href"] == f"/deliveries/{deliveries[0]}"
        assert delivery.all("a")[1].attrs["href"] == "/subscriptions/hook"
        assert delivery.one(class_="last-error").text == "connection refused"
        timed_out = table.one("tr", data_kind="delivery", data_id=str(deliveries[1]))
        assert timed_out.one(class_="last-error").text == "timed out after 5 s"
        assert 'aria-current="page">Dead letters' in response.text
        # A read-only token: the filter form (GET) only, no change of any kind.
        assert change_forms(response.text) == []
        assert sorted(header_forms(response.text)) == ["/logout", "/namespace"]
        buttons = parse(response.text).one("main").all("button")
        assert [b.text for b in buttons] == ["Filter"]
    finally:
        await browser.close()


async def test_the_filter_narrows_and_a_bad_one_is_said_above_the_form(console: Console) -> None:
    _, runs, deliveries = await fill(console)
    browser = await console.login("read", namespaces=["default"])
    try:
        only_runs = await browser.get("/dead-letters?kind=run")
        assert sorted(rows(only_runs.text)) == [("run", i) for i in sorted(runs)]
        doc = parse(only_runs.text)
        assert doc.by_id("dl-kind").one("option", value="run").attrs.get("selected") == ""
        one = await browser.get("/dead-letters?task=boom&queue=dl-1")
        assert rows(one.text) == [("run", runs[1])]
        assert parse(one.text).by_id("dl-queue").attrs["value"] == "dl-1"
        hook = await browser.get("/dead-letters?kind=delivery&subscription=hook")
        assert sorted(rows(hook.text)) == [("delivery", i) for i in sorted(deliveries)]
        blank = await browser.get("/dead-letters?kind=&task=&queue=&subscription=")
        assert len(rows(blank.text)) == 5  # blank fields filter nothing
        none = await browser.get("/dead-letters?task=noop")
        assert parse(none.text).by_id("no-dead-letters").text == (
            "No dead letters match this filter."
        )

        both = await browser.get("/dead-letters?task=boom&subscription=hook")
        assert both.status_code == 400
        assert "not both" in error_of(both.text)
        assert parse(both.text).by_id("dl-task").attrs["value"] == "boom"  # the form stays
        unknown = await browser.get("/dead-letters?subscription=nobody")
        assert unknown.status_code == 404
        assert error_of(unknown.text) == "no subscription named 'nobody'"
        kind = await browser.get("/dead-letters?kind=zombies")
        assert kind.status_code == 400
        assert "kind must be" in error_of(kind.text)
    finally:
        await browser.close()


async def test_requeue_one_dead_run_and_one_dead_delivery(console: Console) -> None:
    services, runs, deliveries = await fill(console)
    store = services.app.store
    browser = await console.login("write", namespaces=["default"])
    try:
        page = parse((await browser.get("/dead-letters?kind=run")).text)
        assert page.one("button", data_testid=f"requeue-run-{runs[0]}")
        assert page.one("button", data_testid=f"purge-run-{runs[0]}")
        purge = page.one("button", data_testid="purge-all")
        assert purge.attrs["class"] == "danger"
        assert page.by_id("dead-letters-bulk").all(
            "form", data_confirm=("Delete every dead letter this filter matches, for good?")
        )

        response = await browser.post("/dead-letters/requeue", {"run": runs[0], "kind": "run"})
        assert response.status_code == 303
        location = response.headers["location"]
        assert urlsplit(location).path == "/dead-letters"
        assert "kind=run" in location  # back to the same filter
        assert notice(location) == f"Requeued 1 run(s) ({runs[0]})"
        assert (await store.get_run(runs[0])).state is RunState.QUEUED
        assert (await store.get_run(runs[1])).state is RunState.DEAD
        left = rows((await browser.get("/dead-letters?kind=run")).text)
        assert ("run", runs[0]) not in left

        response = await browser.post("/dead-letters/requeue", {"delivery": deliveries[0]})
        assert response.status_code == 303
        assert notice(response.headers["location"]) == (
            f"Requeued 1 delivery(ies) ({deliveries[0]})"
        )
        assert (await store.get_delivery(deliveries[0])).state is not DeliveryState.DEAD
        assert (await store.get_delivery(deliveries[1])).state is DeliveryState.DEAD
    finally:
        await browser.close()


async def test_requeue_all_matching_is_an_operation_that_finishes(console: Console) -> None:
    services, runs, deliveries = await fill(console)
    store = services.app.store
    browser = await console.login("write", namespaces=["default"])
    try:
        response = await browser.post(
            "/dead-letters/requeue", {"all": "1", "kind": "run", "task": "boom"}
        )
        assert response.status_code == 303
        location = response.headers["location"]
        path = urlsplit(location).path
        assert path.startswith("/operations/")
        op_id = int(path.rsplit("/", 1)[1])
        assert notice(location) == f"Requeueing every matching dead letter: operation {op_id}"
        deadline = asyncio.get_running_loop().time() + 30.0
        while not (op := await services.operations.get(op_id)).state.terminal:
            assert asyncio.get_running_loop().time() < deadline, "the operation never ended"
            await asyncio.sleep(0.02)
        assert op.state is OperationState.SUCCEEDED, op
        assert op.kind == "dead_letters.requeue"
        assert (op.total, op.done, op.failed) == (3, 3, 0)
        for run_id in runs:
            assert (await store.get_run(run_id)).state is RunState.QUEUED
        for delivery_id in deliveries:  # the filter named runs only
            assert (await store.get_delivery(delivery_id)).state is DeliveryState.DEAD
    finally:
        await browser.close()


async def test_purge_one_and_all_matching(console: Console) -> None:
    services, runs, deliveries = await fill(console)
    store = services.app.store
    browser = await console.login("write", namespaces=["default"])
    try:
        one = await browser.post("/dead-letters/purge", {"run": runs[0]})
        assert one.status_code == 303
        assert notice(one.headers["location"]) == f"Purged 1 run(s) ({runs[0]})"
        with pytest.raises(NotFoundError):
            await store.get_run(runs[0])

        # Every match of a task and queue filter: that run only.
        queue = await browser.post("/dead-letters/purge", {"all": "1", "queue": "dl-2"})
        assert queue.status_code == 303
        assert notice(queue.headers["location"]) == f"Purged 1 run(s) ({runs[2]})"
        assert urlsplit(queue.headers["location"]).query.startswith("queue=dl-2&")
        with pytest.raises(NotFoundError):
            await store.get_run(runs[2])
        assert (await store.get_run(runs[1])).state is RunState.DEAD

        hook = await browser.post(
            "/dead-letters/purge", {"all": "1", "kind": "delivery", "subscription": "hook"}
        )
        assert hook.status_code == 303
        said = notice(hook.headers["location"])
        assert said.startswith("Purged 2 delivery(ies)")
        remaining = rows((await browser.get("/dead-letters")).text)
        assert remaining == [("run", runs[1])]
        for delivery_id in deliveries:
            with pytest.raises(LookupError):
                await store.get_delivery(delivery_id)
    finally:
        await browser.close()


async def test_bad_ids_and_missing_choices_get_an_error_page(console: Console) -> None:
    services, runs, _ = await fill(console)
    queued = (await services.runs.defer("noop")).run.id
    browser = await console.login("write", namespaces=["default"])
    try:
        for action in ("requeue", "purge"):
            text = await browser.post(f"/dead-letters/{action}", {"run": "abc"})
            assert text.status_code == 400
            assert error_of(text.text) == "run ids must be whole numbers from 1, got 'abc'"
            zero = await browser.post(f"/dead-letters/{action}", {"run": "0"})
            assert zero.status_code == 400
            assert "run must be a whole number from 1" in error_of(zero.text)
            unknown = await browser.post(f"/dead-letters/{action}", {"run": "999999"})
            assert unknown.status_code == 400
            assert error_of(unknown.text) == "no run has id 999999"
            alive = await browser.post(f"/dead-letters/{action}", {"run": queued})
            assert alive.status_code == 400
            assert error_of(alive.text) == f"run {queued} is queued, not dead"
            delivery = await browser.post(f"/dead-letters/{action}", {"delivery": "424242"})
            assert delivery.status_code == 400
            assert error_of(delivery.text) == "no delivery has id 424242"
            nothing = await browser.post(f"/dead-letters/{action}", {})
            assert nothing.status_code == 400
            assert "choose dead letters" in error_of(nothing.text)
            both = await browser.post(f"/dead-letters/{action}", {"run": runs[0], "all": "1"})
            assert both.status_code == 400
            assert "not both" in error_of(both.text)
        bad_filter = await browser.post(
            "/dead-letters/requeue", {"all": "1", "task": "boom", "subscription": "hook"}
        )
        assert bad_filter.status_code == 400
        assert "not both" in error_of(bad_filter.text)
        # A mix: the dead one is requeued, the refusal is said.
        mixed = await browser.post("/dead-letters/requeue", {"run": f"{runs[0]},{queued}"})
        assert mixed.status_code == 303
        assert notice(mixed.headers["location"]) == (
            f"Requeued 1 run(s) ({runs[0]}); refused: run {queued} is queued, not dead"
        )
        for run_id in runs[1:]:
            assert (await services.app.store.get_run(run_id)).state is RunState.DEAD
    finally:
        await browser.close()
    reader = await console.login("read", namespaces=["default"])
    try:
        refused = await reader.post("/dead-letters/requeue", {"run": runs[1]})
        assert refused.status_code == 403
        assert (await services.app.store.get_run(runs[1])).state is RunState.DEAD
    finally:
        await reader.close()
