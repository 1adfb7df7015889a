"""``http-sink`` against a real HTTP server on loopback: the task driven directly (start, put,
flush, stop) and through the connector runtime in-process on both stores.

Events arrive as the webhooks of subscriptions do (structured CloudEvents, Standard Webhooks
signatures), responses are classified per record (2xx taken; 408, 429, 5xx,
connection failures and timeouts retried; other statuses refused), the network policy applies
at start and after every resolution, and configs are refused naming the field. Only loopback
addresses are ever connected to.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Mapping
from typing import Any

import pytest

from cronbus import App
from cronbus.connectors.api import RetriableError, TaskError
from cronbus.connectors.builtin import connector_for
from cronbus.connectors.builtin.http_sink import HttpSinkTask, PushRefused
from cronbus.connectors.runtime import ConnectorRuntime
from cronbus.connectors.states import TaskState
from cronbus.errors import ConnectorConfigError
from cronbus.events.event import Event, make_event
from cronbus.events.netpolicy import NetPolicy, parse_networks
from cronbus.events.resolvers import StaticResolver
from cronbus.events.signing import generate_secret
from cronbus.services import ConnectorView, Services
from cronbus.webhooks import verify

from .conftest import until
from .test_connector_runtime import app

__all__ = ["app"]  # fixtures: the test connectors' app on each store
from .http_targets import Received, Targets, flaky, slow, status

DEADLINE = 30.0
SECRET = generate_secret()
LOOPBACK_DENIED = NetPolicy(deny=parse_networks("127.0.0.0/8,::1/128", "test"))


def event(n: int) -> Event:
    return make_event("order.created", {"n": n}, subject=str(n), id=f"order-{n}")


def config(url: str, **more: Any) -> dict[str, Any]:
    return {"url": url, "topic": "orders", **more}


async def started(cfg: Mapping[str, Any], **options: Any) -> HttpSinkTask:
    task = HttpSinkTask(**options)
    await task.start(cfg)
    return task


async def put_one(url: str, **more: Any) -> BaseException | None:
    """Start a task on ``url``, put one event, stop; the event's outcome."""
    task = await started(config(url, **more))
    try:
        (outcome,) = await task.put([event(1)])
        await task.flush({"orders": 1})
    finally:
        await task.stop()
    return outcome


def free_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# -- the task, driven directly -----------------------------------------------------------------


async def test_put_posts_each_record_as_a_signed_cloudevent(targets: Targets) -> None:
    url = targets.url("/hooks")
    task = await started(config(url, secret=SECRET, headers={"Authorization": "Bearer t0k"}))
    records = [event(n) for n in range(1, 6)]
    try:
        assert await task.put(records) == [None] * 5
        await task.flush({"orders": 5})
    finally:
        await task.stop()
    got = {r.event["id"]: r for r in targets.received["/hooks"]}
    assert sorted(got) == sorted(r.id for r in records)
    for record in records:
        request = got[record.id]
        assert request.event == record.to_cloudevent()
        assert request.headers["content-type"] == "application/cloudevents+json"
        assert request.headers["authorization"] == "Bearer t0k"
        assert request.headers["webhook-id"] == record.id
        assert verify(request.body, request.headers, SECRET) == record.to_cloudevent()


async def test_without_a_secret_the_id_is_sent_unsigned(targets: Targets) -> None:
    assert await put_one(targets.url("/plain")) is None
    (request,) = targets.received["/plain"]
    assert request.headers["webhook-id"] == "order-1"
    assert "webhook-signature" not in request.headers


async def test_a_rotation_signs_with_every_secret(targets: Targets) -> None:
    new = generate_secret()
    assert await put_one(targets.url("/rotating"), secret=[SECRET, new]) is None
    (request,) = targets.received["/rotating"]
    assert len(request.headers["webhook-signature"].split()) == 2
    for secret in (SECRET, new):
        verify(request.body, request.headers, secret)


@pytest.mark.parametrize("code", [408, 429, 500, 502, 503])
async def test_retriable_statuses_are_retriable_errors(targets: Targets, code: int) -> None:
    outcome = await put_one(targets.on("/busy", status(code)))
    assert isinstance(outcome, RetriableError)
    assert f"HTTP {code}" in str(outcome)


@pytest.mark.parametrize(
    ("code", "says"),
    [(400, "HTTP 400"), (404, "HTTP 404"), (302, "redirect to")],
)
async def test_other_statuses_refuse_the_record(targets: Targets, code: int, says: str) -> None:
    headers = {"Location": "http://127.0.0.1:1/elsewhere"} if code == 302 else {}
    outcome = await put_one(targets.on("/no", status(code, headers)))
    assert isinstance(outcome, PushRefused)
    assert not isinstance(outcome, RetriableError)
    assert says in str(outcome)
    assert str(outcome).startswith(f"127.0.0.1:{targets.port}: ")  # host:port, never the URL


async def test_a_410_gone_is_the_tasks_failure_not_the_records(targets: Targets) -> None:
    outcome = await put_one(targets.on("/gone", status(410)))
    assert isinstance(outcome, TaskError)
    assert "the endpoint says it is gone" in str(outcome)


async def test_a_refusal_keeps_the_start_of_the_response(targets: Targets) -> None:
    outcome = await put_one(targets.on("/why", status(422)))
    assert str(outcome).endswith("HTTP 422: status 422")  # the helper's body


async def test_connection_failures_and_timeouts_are_retriable(targets: Targets) -> None:
    refused = await put_one(f"http://127.0.0.1:{free_port()}/gone")
    assert isinstance(refused, RetriableError)
    late = await put_one(targets.on("/slow", slow(2.0)), timeout=0.2)
    assert isinstance(late, RetriableError)
    assert "timed out after 0.2 s" in str(late)


async def test_one_refused_record_fails_alone(targets: Targets) -> None:
    def refuse_three(request: Received) -> tuple[int, dict[str, str], float]:
        return (400 if request.event["id"] == "order-3" else 200), {}, 0.0

    task = await started(config(targets.on("/mixed", refuse_three)))
    try:
        outcomes = await task.put([event(n) for n in range(1, 6)])
    finally:
        await task.stop()
    assert [o is None for o in outcomes] == [True, True, False, True, True]
    assert isinstance(outcomes[2], PushRefused)


async def test_pushes_run_concurrently_up_to_max_in_flight(targets: Targets) -> None:
    # Unbounded enough: six requests held 1 s each all arrive before the first answer.
    wide = await started(config(targets.on("/wide", slow(1.0)), max_in_flight=6))
    try:
        assert await wide.put([event(n) for n in range(1, 7)]) == [None] * 6
    finally:
        await wide.stop()
    arrived = sorted(r.at for r in targets.received["/wide"])
    assert arrived[-1] - arrived[0] < 1.0
    # Two at a time: the third request cannot start before one of the first two answered.
    narrow = await started(config(targets.on("/narrow", slow(0.3)), max_in_flight=2))
    try:
        assert await narrow.put([event(n) for n in range(1, 7)]) == [None] * 6
    finally:
        await narrow.stop()
    arrived = sorted(r.at for r in targets.received["/narrow"])
    assert all(arrived[i + 2] - arrived[i] >= 0.29 for i in range(len(arrived) - 2)), arrived


async def test_a_literal_address_the_workers_policy_denies_fails_the_start(
    targets: Targets,
) -> None:
    task = HttpSinkTask(policy=LOOPBACK_DENIED)
    with pytest.raises(ConnectorConfigError, match="denied network") as refused:
        await task.start(config(targets.url("/hooks")))
    assert refused.value.field == "config.url"
    await task.stop()
    assert targets.received == {}


async def test_a_name_resolving_to_a_denied_address_is_not_reached(targets: Targets) -> None:
    resolver = StaticResolver({"hooks.test": ["127.0.0.1"]})
    url = f"http://hooks.test:{targets.port}/hooks"
    task = await started(config(url), policy=LOOPBACK_DENIED, resolver=resolver)
    try:
        (outcome,) = await task.put([event(1)])
    finally:
        await task.stop()
    assert isinstance(outcome, RetriableError)
    assert "resolves only to denied addresses" in str(outcome)
    assert targets.received == {}
    # The same name with loopback allowed is reached: the refusal was the policy's.
    task = await started(config(url), resolver=StaticResolver({"hooks.test": ["127.0.0.1"]}))
    try:
        assert await task.put([event(1)]) == [None]
    finally:
        await task.stop()
    assert targets.ids("/hooks") == ["order-1"]


async def test_put_before_start_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError, match="before start"):
        await HttpSinkTask().put([event(1)])


# -- configs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "field", "says"),
    [
        ({"url": "ftp://127.0.0.1/x"}, "config.url", "is not an http(s) URL"),
        ({"url": "http://127.0.0.1/a b"}, "config.url", "spaces"),
        ({"url": "http://169.254.169.254/"}, "config.url", "denied network"),
        ({"headers": {"bad name": "x"}}, "config.headers", "HTTP header names"),
        ({"headers": {"X-Token": "a\r\nInjected: 1"}}, "config.headers", "control character"),
        ({"headers": {"X-Count": 3}}, "config.headers", "must be text"),
        ({"headers": ["X-Token"]}, "config.headers", "must be an object"),
        ({"headers": {"webhook-signature": "v1,x"}}, "config.headers", "set by cronbus"),
        ({"secret": "hunter2"}, "config.secret", "starts with 'whsec_'"),
        ({"secret": 42}, "config.secret", "must be a whsec_"),
        ({"timeout": 0}, "config.timeout", "must be a number > 0"),
        ({"max_in_flight": 0}, "config.max_in_flight", "from 1 to 1000"),
        ({"retries": 3}, "config.retries", "unknown field"),
        ({"topic": None}, "config.topic", "required"),
    ],
)
def test_a_bad_config_is_refused_naming_the_field(
    given: dict[str, Any], field: str, says: str
) -> None:
    bad = {**config("http://127.0.0.1:8080/hooks"), **given}
    with pytest.raises(ConnectorConfigError, match=re.escape(says)) as refused:
        connector_for("http-sink").validate(bad)
    assert refused.value.field == field
    assert "hunter2" not in str(refused.value)  # a secret is never echoed
    assert "Injected" not in str(refused.value)  # nor a header value


def test_a_config_is_normalised_with_its_defaults() -> None:
    checked = connector_for("http-sink").validate(config("https://127.0.0.1/hooks", secret=SECRET))
    assert checked == {
        "url": "https://127.0.0.1/hooks",
        "topic": "orders",
        "headers": {},
        "secret": [SECRET],
        "timeout": 10.0,
        "max_in_flight": 8,
    }
    assert len(connector_for("http-sink").task_configs(checked, 3)) == 3


# -- through the runtime -------------------------------------------------------------------------


async def sink_through_runtime(
    app: App, cfg: dict[str, Any], events: int, **options: Any
) -> ConnectorView:
    """Publish ``events`` orders, create the sink, run a runtime until it has read them all."""
    await app.publish_many_async("orders", [event(n) for n in range(1, events + 1)])
    services = Services(app)
    await services.connectors.create("hooks-out", "http-sink", cfg, **options)
    runtime = ConnectorRuntime(
        app.store,
        app.connector_kinds,
        app.clock,
        holder="worker-a",
        lease_seconds=2.0,
        poll_seconds=0.05,
        batch=100,
    )
    stopping = asyncio.Event()
    running = asyncio.create_task(runtime.run(stopping))
    try:

        async def done() -> bool:
            view = await services.connectors.get("hooks-out")
            return view.tasks[0].lag == 0 and view.tasks[0].task.positions != {}

        await until(done, DEADLINE)
    finally:
        stopping.set()
        await asyncio.wait_for(running, DEADLINE)
    return await services.connectors.get("hooks-out")


async def test_events_of_a_topic_arrive_signed_through_the_runtime(
    app: App, targets: Targets
) -> None:
    cfg = config(targets.url("/orders"), secret=SECRET, max_in_flight=4)
    view = await sink_through_runtime(app, cfg, 40)
    stored = {e.id: e for e in await app.store.read_events("orders", 0, 1000)}
    received = targets.received["/orders"]
    assert sorted(r.event["id"] for r in received) == sorted(stored)  # each once
    for request in received:
        doc = verify(request.body, request.headers, SECRET)
        assert doc["topic"] == "orders"
        assert doc["offset"] == stored[doc["id"]].offset
        assert doc["data"] == stored[doc["id"]].data
    task = view.tasks[0].task
    assert (task.counts.delivered, task.counts.dead, task.counts.retried) == (40, 0, 0)
    assert task.positions == {"orders": 40}


async def test_a_503_then_200_is_retried_and_counted(app: App, targets: Targets) -> None:
    view = await sink_through_runtime(app, config(targets.on("/flaky", flaky(1, 503))), 3)
    assert sorted(targets.ids("/flaky", 503)) == ["order-1", "order-2", "order-3"]
    assert sorted(targets.ids("/flaky", 200)) == ["order-1", "order-2", "order-3"]
    task = view.tasks[0].task
    assert (task.counts.delivered, task.counts.dead, task.counts.retried) == (3, 0, 3)
    assert await Services(app).connectors.dead_records("hooks-out") == []


async def test_a_400_dead_letters_exactly_that_event_with_tolerance_all(
    app: App, targets: Targets
) -> None:
    def refuse_seven(request: Received) -> tuple[int, dict[str, str], float]:
        return (400 if request.event["id"] == "order-7" else 200), {}, 0.0

    cfg = config(targets.on("/strict", refuse_seven))
    view = await sink_through_runtime(app, cfg, 10, tolerance="all")
    (dead,) = await Services(app).connectors.dead_records("hooks-out")
    assert dead.record["id"] == "order-7"
    assert dead.error.startswith(f"PushRefused: 127.0.0.1:{targets.port}: HTTP 400")
    assert targets.ids("/strict", 400) == ["order-7"]  # refused for good: never sent again
    assert sorted(targets.ids("/strict")) == sorted(f"order-{n}" for n in range(1, 11) if n != 7)
    task = view.tasks[0].task
    assert (task.counts.delivered, task.counts.dead, task.counts.retried) == (9, 1, 0)
    assert task.positions == {"orders": 10}


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"url": "file:///etc/passwd"}, "config.url"),
        ({"headers": {"X-Token": "a\nb"}}, "config.headers"),
    ],
)
async def test_creating_with_a_bad_config_is_refused_and_stores_nothing(
    app: App, given: dict[str, Any], field: str
) -> None:
    services = Services(app)
    bad = {**config("http://127.0.0.1:8080/hooks"), **given}
    with pytest.raises(ConnectorConfigError) as refused:
        await services.connectors.create("hooks-out", "http-sink", bad)
    assert refused.value.field == field
    assert await services.connectors.list() == []


async def test_a_gone_endpoint_fails_the_task_even_with_tolerance_all(
    app: App, targets: Targets
) -> None:
    await app.publish_many_async("orders", [event(n) for n in range(1, 6)])
    services = Services(app)
    cfg = config(targets.on("/gone", status(410)))
    await services.connectors.create("hooks-out", "http-sink", cfg, tolerance="all")
    runtime = ConnectorRuntime(
        app.store, app.connector_kinds, app.clock, holder="worker-a", lease_seconds=2.0
    )
    stopping = asyncio.Event()
    running = asyncio.create_task(runtime.run(stopping))
    try:

        async def failed() -> bool:
            view = await services.connectors.get("hooks-out")
            return view.tasks[0].task.state is TaskState.FAILED

        await until(failed, DEADLINE)
    finally:
        stopping.set()
        await asyncio.wait_for(running, DEADLINE)
    task = (await services.connectors.get("hooks-out")).tasks[0].task
    assert task.error is not None
    assert "gone" in task.error
    assert await services.connectors.dead_records("hooks-out") == []  # nothing dead-lettered
    assert task.positions == {}  # the events wait for a restart
