"""The store contract for namespaces: every record keeps its namespace, claims and the queues a
worker sees stay in theirs, names are unique per store, idempotency keys per namespace,
and an operator can drain a worker."""

from __future__ import annotations

import pytest

from cronbus.errors import ConflictError, JobExistsError, NotFoundError, WorkerNotFoundError
from cronbus.events.records import NewEvent, SubscriptionSpec
from cronbus.model import (
    ClaimRequest,
    ErrorInfo,
    Fire,
    JobSpec,
    NewRun,
    Outcome,
    QueueShare,
    Run,
    RunFilter,
    WorkerInfo,
)
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store
from cronbus.store.logic import job_run

T0 = 1_700_000_000.0
LEASE = 30.0
HOOK = {"kind": "webhook", "url": "http://127.0.0.1:9/hook"}
EVERY = {"kind": "every", "seconds": 10.0}


def new(namespace: str, queue: str = "q", eta: float = T0, **kw: object) -> NewRun:
    return NewRun(task="t", queue=queue, eta=eta, namespace=namespace, **kw)  # type: ignore[arg-type]


def claim(namespace: str, *queues: str, worker: str = "w", limit: int = 10) -> ClaimRequest:
    return ClaimRequest(
        worker_id=worker,
        queues=[QueueShare(name=q, limit=limit) for q in queues or ("q",)],
        limit=limit,
        lease_seconds=LEASE,
        namespace=namespace,
    )


def job(name: str = "j", namespace: str = "default", **kw: object) -> JobSpec:
    return JobSpec(name=name, task="t", trigger=EVERY, namespace=namespace, **kw)  # type: ignore[arg-type]


def sub(name: str = "s", namespace: str = "default", topic: str = "orders") -> SubscriptionSpec:
    return SubscriptionSpec(name=name, topic=topic, target=dict(HOOK), namespace=namespace)


def event(i: int) -> NewEvent:
    return NewEvent(id=f"e{i}", type="t", source="test", time=T0, data_json="{}")


def worker(worker_id: str, namespace: str = "default", **kw: object) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        host="h",
        pid=1,
        queues=("q",),
        concurrency=4,
        version="1",
        started_at=T0,
        heartbeat_at=T0,
        namespace=namespace,
        **kw,  # type: ignore[arg-type]
    )


# -- runs ------------------------------------------------------------------------------------------
async def test_runs_keep_their_namespace(store: Store) -> None:
    a, b = await store.defer([new("a"), new("default")], T0)
    assert (await store.get_run(a.id)).namespace == "a"
    assert (await store.get_run(b.id)).namespace == "default"
    (plain,) = await store.defer([NewRun(task="t", queue="q", eta=T0)], T0)
    assert (await store.get_run(plain.id)).namespace == "default"


async def test_a_claim_takes_only_runs_of_its_namespace(store: Store) -> None:
    ours = await store.defer([new("a"), new("a", eta=T0 + 5)], T0)
    theirs = await store.defer([new("b"), new("b", eta=T0 + 5)], T0)
    claimed = await store.claim(claim("a"), T0 + 10)
    assert [c.run_id for c in claimed] == [d.id for d in ours]
    assert await store.claim(claim("default"), T0 + 10) == []
    rest = await store.claim(claim("b"), T0 + 10)
    assert sorted(c.run_id for c in rest) == [d.id for d in theirs]


async def test_ready_queues_and_next_eta_are_per_namespace(store: Store) -> None:
    await store.defer([new("a", queue="qa"), new("a", queue="late", eta=T0 + 50)], T0)
    await store.defer([new("b", queue="qb"), new("b", queue="later", eta=T0 + 90)], T0)
    assert await store.ready_queues(T0, "a") == ["qa"]
    assert await store.ready_queues(T0, "b") == ["qb"]
    assert await store.ready_queues(T0) == []
    assert await store.ready_queues(T0 + 60, "a") == ["late", "qa"]
    assert await store.next_eta(None, "a") == T0 + 50
    assert await store.next_eta(["later"], "b") == T0 + 90
    assert await store.next_eta(["later"], "a") is None
    assert await store.next_eta(None) is None


async def test_an_idempotency_key_is_unique_per_namespace(store: Store) -> None:
    # A key held in one namespace is no one else's business: another namespace that uses it
    # gets a run of its own, never the first one's id (nor a refusal that says it exists).
    (a,) = await store.defer([new("a", idempotency_key="k")], T0)
    (b,) = await store.defer([new("b", idempotency_key="k")], T0)
    assert a.created
    assert b.created
    assert b.id != a.id
    assert (await store.get_run(b.id)).namespace == "b"
    # In one batch: a repeat in each namespace returns that namespace's run, and a key used
    # twice in a new namespace makes one run there.
    done = await store.defer(
        [
            new("b", idempotency_key="k"),
            new("a", idempotency_key="k"),
            new("c", idempotency_key="k"),
            new("c", idempotency_key="k"),
        ],
        T0,
    )
    assert [(d.id, d.created) for d in done[:2]] == [(b.id, False), (a.id, False)]
    assert done[2].created
    assert (done[3].id, done[3].created) == (done[2].id, False)
    assert (await store.get_run(done[2].id)).namespace == "c"
    assert len({a.id, b.id, done[2].id}) == 3


async def test_an_idempotency_key_is_per_namespace_on_routed_runs(store: Store) -> None:
    # Runs with a limit take the store's other insert (routing columns): the same rule holds.
    limited = {"limit_key": "t", "limit_max": 1}
    (a,) = await store.defer([new("a", idempotency_key="k", **limited)], T0)
    b, again = await store.defer(
        [new("b", idempotency_key="k", **limited), new("a", idempotency_key="k", **limited)], T0
    )
    assert a.created
    assert b.created
    assert b.id != a.id
    assert (again.id, again.created) == (a.id, False)
    assert (await store.get_run(b.id)).namespace == "b"


async def test_job_runs_inherit_the_jobs_namespace(store: Store) -> None:
    stored = await store.put_job(job(namespace="a"), T0, T0)
    assert stored.spec.namespace == "a"
    fire = Fire(job_id=stored.id, expected=T0, next_fire_at=T0 + 10, runs=[job_run(stored, T0, T0)])
    assert await store.fire([fire], T0) == [True]
    (run,) = await runs_of(store, "a")
    assert run.job_id == stored.id
    assert await runs_of(store, "default") == []


async def runs_of(store: Store, namespace: str) -> list[Run]:
    return await store.list_runs(RunFilter(namespace=namespace))


# -- jobs ------------------------------------------------------------------------------------------
async def test_jobs_are_listed_by_namespace_and_the_digest_ignores_it(store: Store) -> None:
    await store.put_job(job("x", "a"), T0, T0)
    await store.put_job(job("y", "b"), T0, T0)
    await store.put_job(job("z"), T0, T0)
    assert [j.name for j in await store.list_jobs("a")] == ["x"]
    assert [j.name for j in await store.list_jobs("default")] == ["z"]
    assert [j.name for j in await store.list_jobs()] == ["x", "y", "z"]
    assert (await store.get_job("y")).spec.namespace == "b"
    assert job("x", "a").spec_hash() == job("x", "b").spec_hash()
    assert job("x", "a").spec_hash() != job("x", "a", queue="other").spec_hash()


async def test_a_job_name_of_another_namespace_is_a_conflict(store: Store) -> None:
    await store.put_job(job("x", "a", queue="qa"), T0, T0)
    with pytest.raises(ConflictError, match="namespace 'a'"):
        await store.put_job(job("x", "b", queue="qb"), T0, T0)
    with pytest.raises(JobExistsError):
        await store.put_job(job("x", "b"), T0, T0, create=True)
    # A sync naming it changes nothing at all, not even its other jobs.
    with pytest.raises(ConflictError):
        await store.put_jobs([(job("fresh", "b"), T0), (job("x", "b"), T0)], T0)
    kept = await store.get_job("x")
    assert (kept.spec.namespace, kept.spec.queue) == ("a", "qa")
    assert [j.name for j in await store.list_jobs()] == ["x"]
    # The same namespace replaces it as before.
    again = await store.put_job(job("x", "a", queue="qa2"), T0, T0)
    assert again.spec.queue == "qa2"


# -- topics and subscriptions ----------------------------------------------------------------------
async def test_the_first_append_creates_the_topic_in_its_namespace(store: Store) -> None:
    await store.append("orders", [event(1)], T0, namespace="a")
    await store.append("audit", [event(1)], T0)
    assert (await store.get_topic("orders")).namespace == "a"
    assert (await store.get_topic("audit")).namespace == "default"
    assert [t.name for t in await store.list_topics("a")] == ["orders"]
    assert [t.name for t in await store.list_topics("default")] == ["audit"]
    assert [t.name for t in await store.list_topics()] == ["audit", "orders"]


async def test_appending_to_a_topic_of_another_namespace_is_refused(store: Store) -> None:
    await store.append("orders", [event(1)], T0, namespace="a")
    with pytest.raises(ConflictError, match="topic 'orders' belongs to namespace 'a'"):
        await store.append("orders", [event(2), event(3)], T0, namespace="b")
    with pytest.raises(ConflictError):
        await store.append("orders", [event(4)], T0)
    topic = await store.get_topic("orders")
    assert (topic.last_offset, topic.events) == (1, 1)
    assert [e.id for e in await store.read_events("orders", 0, 10)] == ["e1"]
    (more,) = await store.append("orders", [event(2)], T0, namespace="a")
    assert (more.offset, more.created) == (2, True)


async def test_retention_creates_a_topic_in_its_namespace(store: Store) -> None:
    await store.set_retention("kept", 60.0, None, namespace="a")
    assert (await store.get_topic("kept")).namespace == "a"
    await store.set_retention("kept", 30.0, None, namespace="b")
    topic = await store.get_topic("kept")
    assert (topic.namespace, topic.max_age) == ("a", 30.0)


async def test_subscriptions_keep_their_namespace(store: Store) -> None:
    await store.put_subscription(sub("s1", "a"), T0)
    await store.put_subscription(sub("s2", "b", topic="audit"), T0, create=True)
    assert (await store.get_subscription("s1")).spec.namespace == "a"
    assert [s.name for s in await store.list_subscriptions(namespace="a")] == ["s1"]
    assert [s.name for s in await store.list_subscriptions(namespace="b")] == ["s2"]
    assert [s.name for s in await store.list_subscriptions()] == ["s1", "s2"]
    assert [s.name for s in await store.list_subscriptions("audit", "a")] == []
    assert [s.name for s in await store.list_subscriptions("audit", "b")] == ["s2"]
    # The same definition added again is the same subscription.
    same = await store.put_subscription(sub("s2", "b", topic="audit"), T0, create=True)
    assert same.spec.namespace == "b"


async def test_a_subscription_name_of_another_namespace_is_a_conflict(store: Store) -> None:
    await store.put_subscription(sub("s1", "a"), T0)
    with pytest.raises(ConflictError, match="namespace 'a'"):
        await store.put_subscription(sub("s1", "b", topic="audit"), T0)
    with pytest.raises(ConflictError):
        await store.put_subscription(sub("s1", "b"), T0, create=True)
    kept = await store.get_subscription("s1")
    assert (kept.spec.namespace, kept.topic) == ("a", "orders")


# -- workers ---------------------------------------------------------------------------------------
async def test_workers_keep_their_namespace_and_tasks(store: Store) -> None:
    await store.register_worker(worker("w1", "a", tasks=("send", "bill")))
    await store.register_worker(worker("w2"))
    seen = {w.id: w for w in await store.list_workers(T0)}
    assert (seen["w1"].namespace, tuple(seen["w1"].tasks)) == ("a", ("send", "bill"))
    assert (seen["w2"].namespace, tuple(seen["w2"].tasks)) == ("default", ())
    assert [w.id for w in await store.list_workers(T0, "a")] == ["w1"]
    assert [w.id for w in await store.list_workers(T0, "default")] == ["w2"]
    assert await store.list_workers(T0, "nobody") == []


async def test_a_drain_request_reaches_the_worker_at_its_next_heartbeat(store: Store) -> None:
    await store.register_worker(worker("w1", "a"))
    await store.register_worker(worker("w2", "a"))
    (d,) = await store.defer([new("a")], T0)
    (held,) = await store.claim(claim("a", worker="w1"), T0)
    before = await store.beat("w1", T0 + 1, LEASE)
    assert not before.drain_requested
    assert [h.run_id for h in before.held] == [d.id]
    info = await store.request_drain("w1", T0 + 2)
    assert (info.id, info.drain_requested, tuple(info.running)) == ("w1", True, (held.run_id,))
    after = await store.beat("w1", T0 + 3, LEASE)
    assert after.drain_requested
    assert [h.attempt_id for h in after.held] == [held.attempt_id]
    assert [h.run_id for h in await store.heartbeat("w1", T0 + 4, LEASE)] == [d.id]
    # Only that worker: the other one, and a worker that holds nothing, are told nothing.
    other = await store.beat("w2", T0 + 3, LEASE)
    assert (other.drain_requested, other.held) == (False, [])
    listed = {w.id: w.drain_requested for w in await store.list_workers(T0 + 3)}
    assert listed == {"w1": True, "w2": False}
    # A worker that registers again (a restart under the same id) starts undrained.
    await store.register_worker(worker("w1", "a"))
    assert not (await store.beat("w1", T0 + 5, LEASE)).drain_requested


async def test_draining_an_unknown_worker_is_not_found(store: Store) -> None:
    with pytest.raises(WorkerNotFoundError, match="nobody"):
        await store.request_drain("nobody", T0)
    with pytest.raises(NotFoundError):
        await store.request_drain("nobody", T0)
    unknown = await store.beat("nobody", T0, LEASE)
    assert (unknown.held, unknown.drain_requested) == ([], False)


async def test_requeue_of_every_dead_run_covers_every_namespace(store: Store) -> None:
    runs = await store.defer([new("a"), new("b")], T0)
    for namespace in ("a", "b"):
        (c,) = await store.claim(claim(namespace), T0)
        await store.complete([dead(c.run_id, c.attempt_id)], T0)
    assert {r.state for r in await store.get_runs([d.id for d in runs])} == {RunState.DEAD}
    assert await store.requeue(None, T0 + 1) == sorted(d.id for d in runs)


def dead(run_id: int, attempt_id: int) -> Outcome:
    """A failure without a retry: the run ends dead."""
    return Outcome(
        run_id=run_id,
        attempt_id=attempt_id,
        outcome=AttemptOutcome.FAILED,
        error=ErrorInfo(type="E", message="m"),
    )


async def test_a_subscription_cannot_read_a_topic_of_another_namespace(store: Store) -> None:
    await store.append("orders", [event(1)], T0, namespace="a")
    with pytest.raises(ConflictError, match="topic 'orders' belongs to namespace 'a'"):
        await store.put_subscription(sub("spy", "b"), T0)
    with pytest.raises(ConflictError):
        await store.put_subscription(sub("spy", "b"), T0, create=True)
    assert await store.list_subscriptions() == []
    mine = await store.put_subscription(sub("mine", "a"), T0)
    assert (mine.spec.namespace, mine.cursor) == ("a", 1)
