"""The Python facades (``app.subscriptions``, ``app.events``, run handles) reach the store through
the services: each change leaves the services' audit entry and follows their rules, while the
records returned stay those of the Python API (subscriptions as stored, secrets included).

On real SQLite files and PostgreSQL schemas; no mocks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronbus import App, RunState
from cronbus.errors import (
    ConflictError,
    ForbiddenError,
    InvalidArgumentError,
    InvalidTransitionError,
    SubscriptionNotFoundError,
)
from cronbus.events.signing import generate_secret
from cronbus.handle import RunHandle
from cronbus.services import Services
from integration.test_services_fixtures import STORES, WRITER, open_on
from integration.test_services_fixtures import app as tasks_app

HOOK = "https://user:pw@hooks.example.com/in"


@pytest.fixture(params=STORES)
async def opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The services tests' app (tasks ``add``, ``send``) on a fresh SQLite file or
    PostgreSQL schema."""
    async with open_on(request, tmp_path) as app:
        yield app


async def actions(app: App) -> list[tuple[str, str]]:
    """The audit log's (action, resource), oldest first."""
    page = await app.services().audit.list(limit=250)
    return [(e.action, e.resource) for e in reversed(page.items)]


async def test_subscription_changes_go_through_the_service_and_return_stored_records(
    opened: App,
) -> None:
    secret = generate_secret()
    added = await opened.subscriptions.add(
        "hook", topic="orders", webhook=HOOK, secrets=secret, headers={"X-Key": "k1"}
    )
    # The Python API gets the subscription as stored: the caller owns the store.
    assert added.spec.target["url"] == HOOK
    assert added.spec.target["secrets"] == [secret]
    assert added.spec.target["headers"] == {"X-Key": "k1"}
    assert (await opened.subscriptions.get("hook")) == added
    assert [s.name for s in await opened.subscriptions.list("orders")] == ["hook"]
    assert (await opened.subscriptions.pause("hook")).paused
    assert not (await opened.subscriptions.resume("hook")).paused
    changed = await opened.subscriptions.update("hook", max_in_flight=3)
    assert changed.spec.policy.max_in_flight == 3
    assert changed.spec.target["secrets"] == [secret]
    await opened.publish_async("orders", "order.created", {"n": 1})
    assert (await opened.subscriptions.replay("hook", offset=1)).cursor == 0
    await opened.subscriptions.remove("hook")
    with pytest.raises(SubscriptionNotFoundError):
        await opened.subscriptions.get("hook")
    # Publishing is a hot path straight to the store: no audit entry of its own.
    assert await actions(opened) == [
        ("subscriptions.create", "hook"),
        ("subscriptions.pause", "hook"),
        ("subscriptions.resume", "hook"),
        ("subscriptions.update", "hook"),
        ("subscriptions.replay", "hook"),
        ("subscriptions.delete", "hook"),
    ]


async def test_the_services_refusals_reach_the_python_api_naming_the_field(opened: App) -> None:
    with pytest.raises(InvalidArgumentError, match="exactly one target") as neither:
        await opened.subscriptions.add("x", topic="t")
    assert neither.value.field == "webhook"
    with pytest.raises(InvalidArgumentError, match="unknown delivery option") as unknown:
        await opened.subscriptions.add("x", topic="t", task="add", retries=3)
    assert "retries" in str(unknown.value)
    with pytest.raises(InvalidArgumentError) as queue:
        await opened.subscriptions.add("x", topic="t", webhook=HOOK, queue="q")
    assert queue.value.field == "queue"
    await opened.subscriptions.add("x", topic="t", task="add")
    with pytest.raises(InvalidArgumentError) as empty:
        await opened.subscriptions.update("x")
    assert empty.value.field == "changes"
    # Topics under cronbus. are cronbus's own: no retention set on them from the outside.
    with pytest.raises(InvalidArgumentError, match="cronbus"):
        await opened.events.set_retention("cronbus.runs", max_events=5)
    assert await actions(opened) == [("subscriptions.create", "x")]


async def test_stored_subscriptions_are_for_admins_only(opened: App) -> None:
    await opened.subscriptions.add("hook", topic="orders", webhook=HOOK, secrets=generate_secret())
    writer = Services(opened, WRITER).subscriptions
    with pytest.raises(ForbiddenError):
        await writer.stored("hook")
    with pytest.raises(ForbiddenError):
        await writer.stored_list()
    shown = (await writer.get("hook")).subscription
    assert "secrets" not in shown.spec.target
    assert "pw" not in shown.spec.target["url"]


async def test_topics_and_retention_through_the_service(opened: App) -> None:
    await opened.publish_async("orders", "order.created", {"n": 1})
    await opened.events.set_retention("orders", max_events=5)
    info = await opened.events.topic("orders")
    assert (info.max_events, info.last_offset) == (5, 1)
    assert [t.name for t in await opened.events.topics()] == ["orders"]
    # Another namespace's app sees its own topics only, but reaches this one by name.
    other = Services(opened, namespace="other").topics
    assert await other.list() == []
    assert ("topics.set_retention", "orders") in await actions(opened)


async def test_counts_deliveries_and_requeue_of_dead_deliveries(opened: App) -> None:
    await opened.subscriptions.add("jobs", topic="orders", task="add", start="earliest")
    assert await opened.subscriptions.counts("jobs") == {}
    assert await opened.subscriptions.deliveries("jobs") == []
    assert await opened.subscriptions.requeue(subscription="jobs") == []
    assert await opened.subscriptions.requeue([1, 2]) == []  # unknown ids: left as they are


async def test_handles_cancel_and_retry_through_the_runs_service(opened: App) -> None:
    handle = await tasks_app.tasks["add"].defer_async(1, 2)
    assert handle.namespace in (None, "default")  # None: read from the run at first use
    assert (await handle.fetch_async()).state is RunState.QUEUED
    assert handle.namespace == "default"
    with pytest.raises(ConflictError, match="only cancelled or dead"):
        await handle.retry_async()
    assert await handle.cancel_async() is RunState.CANCELLED
    with pytest.raises(InvalidTransitionError, match="already cancelled"):
        await handle.cancel_async()
    assert await handle.retry_async() is RunState.QUEUED
    assert await actions(opened) == [
        ("runs.cancel", str(handle.id)),
        ("runs.retry", str(handle.id)),
    ]


async def test_a_handle_reaches_its_runs_namespace(opened: App) -> None:
    billing = Services(opened, namespace="billing")
    done = await billing.runs.defer("add", [1, 2])
    handle = RunHandle(opened, done.run.id)
    assert (await handle.fetch_async()).namespace == "billing"
    assert await handle.cancel_async() is RunState.CANCELLED
    assert (await billing.audit.list()).items[0].namespace == "billing"


async def test_delivery_states_and_ids_are_checked(opened: App) -> None:
    with pytest.raises(InvalidArgumentError, match="delivery states"):
        await opened.subscriptions.deliveries(states=["lost"])
    with pytest.raises(InvalidArgumentError, match="delivery id"):
        await opened.subscriptions.attempts(0)
