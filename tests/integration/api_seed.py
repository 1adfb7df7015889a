"""A store filled with something behind every endpoint of the HTTP API, for the Schemathesis
run: jobs (cron, interval, paused, a name holding '/'), runs in every state a user can meet
(dead ones with their attempts), a topic with events, webhook and task subscriptions with
deliveries (acknowledged, pending, retrying, dead), a registered worker, a finished bulk
operation, a second namespace, and tokens of each scope (one revoked).

Everything is made through the services where they can make it, and through the store's own
worker and dispatcher calls (claim, complete, lease, take, finish) where only a worker or a
dispatcher would: no row is written by hand. :func:`seed` returns the ids and names it made, so
the run can aim requests at resources that exist instead of stopping at 404s.
"""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import dataclass, field
from typing import Any

from cronbus import App
from cronbus.admin_records import OperationState
from cronbus.connectors.records import Commit, NewDeadRecord
from cronbus.events.records import DeliveryFilter, DeliveryOutcome, DeliveryResult, NewDelivery
from cronbus.job_specs import JobOptions
from cronbus.model import ClaimRequest, ErrorInfo, Outcome, QueueShare, WorkerInfo
from cronbus.services import EventInput, Services, SubscriptionInput
from cronbus.states import AttemptOutcome, RunState

TOPIC = "orders"
OTHER_NAMESPACE = "shop"
WORKER_ID = "seed-worker-1"
DISPATCHER = "seed-dispatcher"


@dataclass
class Seeded:
    """What :func:`seed` made: the values path parameters can take to find something."""

    admin_token: str
    """An admin token of every namespace, for the run itself (never revoked by it)."""
    admin_token_id: str
    runs: dict[RunState, list[int]] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    subscriptions: list[str] = field(default_factory=list)
    deliveries: list[int] = field(default_factory=list)
    dead_deliveries: list[int] = field(default_factory=list)
    operations: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    """Ids of the other tokens (each scope, one revoked): fair game for revoking."""
    namespaces: list[str] = field(default_factory=list)
    connectors: list[str] = field(default_factory=list)
    """Names of connectors (file and postgres sinks; one in the other namespace)."""
    elsewhere: set[str | int] = field(default_factory=set)
    """The ids and names above that live in the other namespace (the rest are in default)."""
    probes: dict[str, str] = field(default_factory=dict)
    """Tokens of scope ``read`` and ``write`` over ``default`` (by scope), and a ``read`` token
    over the other namespace only (by its name), for refusals."""

    @property
    def run_ids(self) -> list[int]:
        """Every seeded run, in state order."""
        return [run_id for ids in self.runs.values() for run_id in ids]

    def path_values(self) -> dict[str, list[str | int]]:
        """Known values of each path parameter name the API uses."""
        return {
            "run_id": list(self.run_ids),
            "name": [*self.jobs, *self.subscriptions, *self.namespaces],
            "worker_id": list(self.workers),
            "topic": list(self.topics),
            "delivery_id": list(self.deliveries),
            "operation_id": list(self.operations),
            "token_id": list(self.tokens),
        }


SEED_FILES = "/tmp/cronbus-api-seed"
"""The directory the seeded file connectors name."""
SEED_DATABASE = "postgresql://127.0.0.1:1/x"
"""The database the seeded ``postgres-sink`` names (nothing listens there)."""


async def seed(app: App) -> Seeded:
    """Fill ``app``'s store (open, fresh) and say what is in it."""
    # The seeded connectors' file and database, allowed as an operator would (nothing runs them).
    app.settings = app.settings.with_overrides(
        connector_files=(SEED_FILES,), connector_databases=(SEED_DATABASE,)
    )
    services = Services(app)
    record, text = await services.tokens.create(
        name="schemathesis", scope="admin", namespaces=["*"]
    )
    seeded = Seeded(admin_token=text, admin_token_id=record.id)
    await services.namespaces.create(OTHER_NAMESPACE)
    await services.namespaces.create("empty")
    seeded.namespaces += ["default", OTHER_NAMESPACE, "empty"]
    await _tokens(services, seeded)
    await _jobs(services, seeded)
    await _runs(app, services, seeded)
    await _events(app, services, seeded)
    await _worker(app, seeded)
    await _operation(services, seeded)
    await _connectors(app, services, seeded)
    return seeded


async def _connectors(app: App, services: Services, seeded: Seeded) -> None:
    """Sinks of each tolerance (nothing runs them), one with dead records, one elsewhere."""
    for name, tol in (("sink-a", "all"), ("sink-b", "none"), ("sink-c", "none")):
        await services.connectors.create(
            name,
            "file-sink",
            {"topic": TOPIC, "path": f"/tmp/cronbus-api-seed/{name}.jsonl"},
            tolerance=tol,
        )
        seeded.connectors.append(name)
    await services.connectors.create(
        "pg",
        "postgres-sink",
        {"topic": TOPIC, "url": "postgresql://u:pw@127.0.0.1:1/x", "table": "t"},
    )
    seeded.connectors.append("pg")
    leases = await app.store.acquire_connector_tasks("seed-w", app.clock.now(), 86400.0, 1)
    dead = tuple(NewDeadRecord(record={"n": n}, error="bad", offset=n) for n in range(1, 5))
    assert await app.store.commit_task(leases[0], Commit(dead=dead), app.clock.now())
    shop = services.using(OTHER_NAMESPACE)
    await shop.connectors.create(
        "shop-sink",
        "file-sink",
        {"topic": "shop.events", "path": "/tmp/cronbus-api-seed/shop.jsonl"},
    )
    seeded.connectors.append("shop-sink")
    seeded.elsewhere.add("shop-sink")


async def _tokens(services: Services, seeded: Seeded) -> None:
    for scope, namespaces in (
        ("read", ["default"]),
        ("write", ["default", OTHER_NAMESPACE]),
        ("admin", [OTHER_NAMESPACE]),
    ):
        record, _ = await services.tokens.create(
            name=f"seed-{scope}", scope=scope, namespaces=namespaces, expires_in=86_400.0
        )
        seeded.tokens.append(record.id)
    revoked, _ = await services.tokens.create(name="seed-revoked", scope="read", namespaces=["*"])
    await services.tokens.revoke(revoked.id)
    seeded.tokens.append(revoked.id)
    # Tokens the run itself sends (their ids are not offered for revoking).
    for scope in ("read", "write"):
        _, text = await services.tokens.create(
            name=f"probe-{scope}", scope=scope, namespaces=["default"]
        )
        seeded.probes[scope] = text
    _, text = await services.tokens.create(
        name="probe-shop", scope="read", namespaces=[OTHER_NAMESPACE]
    )
    seeded.probes[OTHER_NAMESPACE] = text


async def _jobs(services: Services, seeded: Seeded) -> None:
    for name, task, options in (
        ("nightly-report", "send", JobOptions(cron="0 3 * * *", args=["ops@example.com"])),
        ("every-minute", "noop", JobOptions(every=60.0)),
        ("paused-sum", "add", JobOptions(cron="*/5 * * * *", args=[1, 2], paused=True)),
        ("reports/weekly", "noop", JobOptions(cron="0 6 * * mon", tz="Europe/Paris")),
        ("once-later", "noop", JobOptions(at="2099-06-01T12:00:00+02:00")),
        (
            "after-delay",
            "add",
            JobOptions(after=600.0, args=[3, 4], misfire="skip", overlap="skip", max_fires=1),
        ),
    ):
        await services.jobs.create(name, task, options)
        seeded.jobs.append(name)
    triggered = await services.jobs.trigger("every-minute")
    seeded.runs.setdefault(triggered.state, []).append(triggered.id)
    shop = services.using(OTHER_NAMESPACE)
    await shop.jobs.create("shop-sync", "noop", JobOptions(every=300.0))
    seeded.jobs.append("shop-sync")
    seeded.elsewhere.add("shop-sync")


async def _runs(app: App, services: Services, seeded: Seeded) -> None:
    def keep(state: RunState, run_id: int) -> None:
        seeded.runs.setdefault(state, []).append(run_id)

    async def defer(queue: str, task: str = "add", **kwargs: object) -> int:
        args = {"add": [1, 2], "send": ["a@example.com"], "flaky": ["no luck"]}[task]
        result = await services.runs.defer(task, args, queue=queue, **kwargs)  # type: ignore[arg-type]
        return result.run.id

    keep(RunState.QUEUED, await defer("default"))
    keep(RunState.QUEUED, await defer("mail", "send", priority=5, idempotency_key="seed-once"))
    keep(RunState.SCHEDULED, await defer("default", delay=3600.0))
    cancelled = await defer("default")
    await services.runs.cancel(cancelled)
    keep(RunState.CANCELLED, cancelled)
    # Each claimed run waits alone in its own queue, so the claim takes that run.
    running = await defer("seed-running")
    await _claim(app, running)
    keep(RunState.RUNNING, running)
    cancelling = await defer("seed-cancelling")
    await _claim(app, cancelling)
    await services.runs.cancel(cancelling)
    keep(RunState.CANCELLING, cancelling)
    succeeded = await defer("seed-succeeded")
    await _end(app, succeeded, AttemptOutcome.SUCCEEDED, result_json="3", logs="added\n")
    keep(RunState.SUCCEEDED, succeeded)
    retrying = await defer("seed-retrying", "flaky")
    await _end(app, retrying, AttemptOutcome.FAILED, retry_at=app.clock.now() + 3600.0)
    keep(RunState.SCHEDULED, retrying)
    for n in range(3):
        dead = await defer(f"seed-dead-{n}", "flaky")
        outcome = AttemptOutcome.TIMED_OUT if n == 2 else AttemptOutcome.FAILED
        await _end(app, dead, outcome, logs=f"attempt of dead run {n}\n")
        keep(RunState.DEAD, dead)
    shop = services.using(OTHER_NAMESPACE)
    elsewhere = (await shop.runs.defer("noop")).run.id
    keep(RunState.QUEUED, elsewhere)
    seeded.elsewhere.add(elsewhere)
    for state, ids in seeded.runs.items():
        for run_id in ids:
            got = await app.store.get_run(run_id)
            assert got.state is state, (run_id, got.state, state)


async def _claim(app: App, run_id: int) -> tuple[int, int]:
    """Claim ``run_id`` as a worker does; returns its attempt id and fence."""
    run = await app.store.get_run(run_id)
    request = ClaimRequest(
        worker_id=WORKER_ID,
        queues=[QueueShare(name=run.queue, limit=1)],
        limit=1,
        lease_seconds=86_400.0,
        namespace=run.namespace,
    )
    (claimed,) = await app.store.claim(request, app.clock.now())
    assert claimed.run_id == run_id, (claimed.run_id, run_id)
    return claimed.attempt_id, claimed.fence


async def _end(
    app: App,
    run_id: int,
    outcome: AttemptOutcome,
    *,
    result_json: str | None = None,
    logs: str = "",
    retry_at: float | None = None,
) -> None:
    """Claim ``run_id`` and end its attempt with ``outcome`` (a failure without ``retry_at``
    makes it dead)."""
    attempt, fence = await _claim(app, run_id)
    error = None
    if outcome is not AttemptOutcome.SUCCEEDED:
        error = ErrorInfo(type="ValueError", message="boom", traceback="Traceback ...\n")
    ended = Outcome(
        run_id=run_id,
        attempt_id=attempt,
        outcome=outcome,
        result_json=result_json,
        error=error,
        logs=logs,
        retry_at=retry_at,
        fence=fence,
    )
    assert await app.store.complete([ended], app.clock.now()) == [True]


async def _events(app: App, services: Services, seeded: Seeded) -> None:
    await services.topics.publish(
        TOPIC,
        [
            EventInput(type="order.created", data={"id": n, "total": 9.5 * n}, key=f"c{n % 2}")
            for n in range(1, 7)
        ],
    )
    await services.topics.set_retention(TOPIC, max_age=7 * 86_400.0)
    shop = services.using(OTHER_NAMESPACE)
    await shop.topics.publish("shop.events", [EventInput(type="shop.opened", data=None)])
    seeded.topics += [TOPIC, "shop.events"]
    seeded.elsewhere.add("shop.events")
    # Port 9 (discard) on loopback: nothing pushes in this run anyway (no dispatcher).
    for name, given in (
        (
            "hook",
            SubscriptionInput(
                name="hook",
                topic=TOPIC,
                webhook="http://127.0.0.1:9/hook",
                start="earliest",
                max_attempts=3,
            ),
        ),
        (
            "tasked",
            SubscriptionInput(
                name="tasked", topic=TOPIC, task="on_event", types=["order.*"], start="earliest"
            ),
        ),
        (
            "idle",
            SubscriptionInput(
                name="idle", topic=TOPIC, webhook="http://127.0.0.1:9/idle", headers={"X-Seed": "1"}
            ),
        ),
    ):
        await services.subscriptions.create(given)
        seeded.subscriptions.append(name)
    await services.subscriptions.pause("idle")
    await _deliver(app, seeded)


async def _deliver(app: App, seeded: Seeded) -> None:
    """Play a dispatcher for ``hook``: record a delivery per event, then acknowledge one,
    retry one, kill two (dead letters) and leave the rest pending."""
    store, now = app.store, app.clock.now()
    (lease,) = [
        lease
        for lease in await store.acquire_subscriptions(DISPATCHER, now, 3600.0, 100)
        if lease.subscription == "hook"
    ]
    events = await store.read_events(TOPIC, 0, 100)
    news = [NewDelivery(offset=e.offset, event_id=e.id, key=e.key) for e in events]
    assert await store.advance(lease, events[-1].offset, news, now)
    taken = await store.take_deliveries(lease, now, 4, 4)
    assert len(taken) == 4, taken
    results = [
        DeliveryResult(
            delivery_id=taken[0].id,
            outcome=DeliveryOutcome.ACKED,
            started_at=now,
            finished_at=now + 0.01,
            status=204,
        ),
        DeliveryResult(
            delivery_id=taken[1].id,
            outcome=DeliveryOutcome.FAILED,
            started_at=now,
            finished_at=now + 0.02,
            status=503,
            response="busy",
            retry_at=now + 3600.0,
        ),
        DeliveryResult(
            delivery_id=taken[2].id,
            outcome=DeliveryOutcome.FAILED,
            started_at=now,
            finished_at=now + 0.03,
            error="connection refused",
        ),
        DeliveryResult(
            delivery_id=taken[3].id,
            outcome=DeliveryOutcome.TIMED_OUT,
            started_at=now,
            finished_at=now + 5.0,
            error="timed out after 5 s",
        ),
    ]
    assert await store.finish_deliveries(lease, results, now) == [True] * 4
    await store.release_subscriptions(DISPATCHER, ["hook"])
    seeded.dead_deliveries += [taken[2].id, taken[3].id]
    everything = await store.read_events(TOPIC, 0, 100)
    assert len(everything) == len(news)
    seeded.deliveries += [t.id for t in taken]
    listed = await app.store.list_deliveries(DeliveryFilter(subscription="hook"))
    seeded.deliveries += [d.id for d in listed if d.id not in seeded.deliveries]


async def _worker(app: App, seeded: Seeded) -> None:
    # A heartbeat ahead of now keeps the worker alive (drainable) for the whole run, with no
    # process beating for it.
    now = app.clock.now()
    await app.store.register_worker(
        WorkerInfo(
            id=WORKER_ID,
            host="seed-host",
            pid=os.getpid(),
            queues=["default", "mail"],
            labels=["seed"],
            concurrency=4,
            version="0.0.0",
            started_at=now,
            heartbeat_at=now + 600.0,
            tasks=["add", "send", "noop", "flaky"],
        )
    )
    seeded.workers.append(WORKER_ID)


async def _operation(services: Services, seeded: Seeded) -> None:
    """A bulk retry of one dead run, waited for until it ends (it runs on this loop)."""
    retried = seeded.runs[RunState.DEAD][0]
    op = await services.operations.start("runs.retry", ids=[retried])
    seeded.operations.append(op.id)
    deadline = asyncio.get_running_loop().time() + 10.0
    while not (ended := await services.operations.get(op.id)).state.terminal:
        assert asyncio.get_running_loop().time() < deadline, "the seed operation never ended"
        await asyncio.sleep(0.01)
    assert ended.state is OperationState.SUCCEEDED, ended
    # The retried run is queued again: it is no longer a dead letter.
    seeded.runs[RunState.DEAD].remove(retried)
    seeded.runs.setdefault(RunState.QUEUED, []).append(retried)


SECRET = "whsec_" + base64.b64encode(b"schemathesis-seed-secret-24b").decode()
"""A Standard Webhooks signing secret of the form subscriptions take."""


def valid_requests(seeded: Seeded, now: float) -> dict[str, list[dict[str, Any]]]:
    """Requests each operation should accept (2xx), by operation label (``METHOD /path``):
    ``path_parameters``, ``query`` and ``body`` of each. Random bodies seldom name a task
    that exists with arguments that fit; these reach the handlers that create and change."""
    queued = seeded.runs[RunState.QUEUED]
    dead = seeded.runs[RunState.DEAD]
    return {
        "POST /v1/runs": [
            {"body": {"task": "noop"}},
            {"body": {"task": "add", "args": [1, 2], "priority": 3, "delay": 30.0}},
            {
                "body": {
                    "task": "send",
                    "kwargs": {"to": "a@example.com", "subject": "s"},
                    "queue": "mail",
                    "idempotency_key": "st-once",
                }
            },
            {"body": {"task": "send", "args": ["a@example.com"], "idempotency_key": "st-once"}},
            {"body": {"task": "add", "args": [2**40, -1], "eta": now + 600.0}},
        ],
        "POST /v1/jobs": [
            {"body": {"name": "st-every", "task": "noop", "every": 60}},
            {
                "body": {
                    "name": "st-cron",
                    "task": "add",
                    "cron": "*/10 * * * *",
                    "args": [1, 2],
                    "tz": "Europe/Paris",
                    "jitter": 1.5,
                    "misfire": "skip",
                    "overlap": "skip",
                    "max_fires": 10,
                    "queue": "q1",
                    "priority": 5,
                    "paused": True,
                }
            },
            {
                "body": {
                    "name": "st/at",
                    "task": "send",
                    "at": "2099-01-01T00:00:00Z",
                    "kwargs": {"to": "x@example.com"},
                }
            },
            {"body": {"name": "st-after", "task": "noop", "after": "PT5M"}},
            {
                "body": {"name": "st-shop", "task": "noop", "every": 30},
                "query": {"namespace": OTHER_NAMESPACE},
            },
        ],
        "PATCH /v1/jobs/{name}": [
            {"path_parameters": {"name": "nightly-report"}, "body": {"cron": "0 4 * * *"}},
            {"path_parameters": {"name": "paused-sum"}, "body": {"args": [5, 6]}},
            {"path_parameters": {"name": "reports/weekly"}, "body": {"paused": True}},
            {"path_parameters": {"name": "every-minute"}, "body": {"every": 120, "jitter": 2.0}},
        ],
        "POST /v1/subscriptions": [
            {
                "body": {
                    "name": "st-hook",
                    "topic": TOPIC,
                    "webhook": "http://127.0.0.1:9/st",
                    "types": ["order.*"],
                    "max_attempts": 2,
                    "secrets": [SECRET],
                    "headers": {"X-Team": "st"},
                }
            },
            {
                "body": {
                    "name": "st-task",
                    "topic": TOPIC,
                    "task": "on_event",
                    "start": "earliest",
                    "ordered": True,
                    "data": {"id": [1, 2]},
                }
            },
        ],
        "PATCH /v1/subscriptions/{name}": [
            {"path_parameters": {"name": "hook"}, "body": {"max_attempts": 5, "timeout": 3.0}},
            {"path_parameters": {"name": "tasked"}, "body": {"types": ["order.created"]}},
        ],
        "POST /v1/topics/{topic}/events": [
            {
                "path_parameters": {"topic": TOPIC},
                "body": {"type": "order.paid", "data": [1, None]},
            },
        ],
        "POST /v1/topics/{topic}/events/batch": [
            {
                "path_parameters": {"topic": TOPIC},
                "body": {
                    "events": [
                        {"type": "order.created", "data": {"id": 9}, "key": "c1"},
                        {"type": "order.paid", "subject": "9", "id": "st-event-1"},
                    ]
                },
            },
        ],
        "POST /v1/subscriptions/{name}/replay": [
            {"path_parameters": {"name": "tasked"}, "body": {"offset": 2}},
            {"path_parameters": {"name": "hook"}, "body": {"since": now - 3600.0}},
        ],
        "POST /v1/namespaces": [{"body": {"name": "st-ns"}}],
        "POST /v1/tokens": [
            {"body": {"name": "st-token", "scope": "read", "namespaces": ["default"]}},
            {"body": {"name": "st-w", "scope": "write", "namespaces": ["*"], "expires_in": 60}},
        ],
        "POST /v1/operations": [
            {"body": {"kind": "runs.cancel", "ids": [queued[0]]}},
            {"body": {"kind": "runs.retry", "filter": {"task": "flaky"}}},
            {
                "body": {
                    "kind": "dead_letters.requeue",
                    "ids": [],
                    "delivery_ids": seeded.dead_deliveries[:1],
                }
            },
            {"body": {"kind": "subscriptions.replay", "ids": ["tasked"], "offset": 1}},
        ],
        "POST /v1/dead-letters/requeue": [{"body": {"runs": dead[:1]}}],
        "POST /v1/dead-letters/purge": [
            {"body": {"runs": dead[-1:], "deliveries": seeded.dead_deliveries[-1:]}}
        ],
        "POST /v1/connectors": [
            {
                "body": {
                    "name": "st-sink",
                    "kind": "file-sink",
                    "config": {"topic": TOPIC, "path": "/tmp/cronbus-api-seed/st.jsonl"},
                }
            },
            {
                "body": {
                    "name": "sink-a",
                    "kind": "file-sink",
                    "config": {"topic": TOPIC, "path": "/tmp/cronbus-api-seed/sink-a.jsonl"},
                    "tolerance": "all",
                }
            },
        ],
        "POST /v1/connectors/{name}/restart": [
            {"path_parameters": {"name": "sink-b"}, "body": {"task": 0}},
            {"path_parameters": {"name": "sink-b"}},
        ],
        "POST /v1/workers/{worker_id}/drain": [{"path_parameters": {"worker_id": WORKER_ID}}],
    }
