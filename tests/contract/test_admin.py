"""The store contract for the admin tables (both stores): namespaces, tokens, the audit log,
idempotency claims and bulk operations."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import pytest

from cronbus.admin_records import AuditEntry, OperationState, TokenRecord
from cronbus.errors import ConflictError, NotFoundError
from cronbus.events.records import NewEvent, SubscriptionSpec
from cronbus.model import JobSpec, NewRun
from cronbus.store import Store, open_store

T0 = 1_700_000_000.0
HOOK = {"kind": "webhook", "url": "http://127.0.0.1:9/hook"}


def token(n: int = 1, **kw: object) -> TokenRecord:
    fields: dict[str, object] = {
        "id": f"{n:012x}",
        "name": f"token {n}",
        "hash": f"{n:064x}",
        "scope": "write",
        "namespaces": ("default",),
        "created_at": T0 + n,
        "created_by": "local",
    }
    fields.update(kw)
    return TokenRecord(**fields)  # type: ignore[arg-type]


def entry(n: int, namespace: str | None = "default", **kw: object) -> AuditEntry:
    fields: dict[str, object] = {
        "at": T0 + n,
        "actor": "local",
        "namespace": namespace,
        "action": "jobs.pause",
        "resource": f"job-{n}",
        "detail": {"n": n},
    }
    fields.update(kw)
    return AuditEntry(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def other(store: Store) -> AsyncIterator[Store]:
    """A second store object (its own connections) on the contract store."""
    second = open_store(store.url)
    await second.open()
    try:
        yield second
    finally:
        await second.close()


# -- namespaces ----------------------------------------------------------------------------------
async def test_default_namespace_exists_from_the_start(store: Store) -> None:
    assert [n.name for n in await store.list_namespaces()] == ["default"]
    assert (await store.get_namespace("default")).name == "default"


async def test_put_get_list_and_delete_namespaces(store: Store) -> None:
    made = await store.put_namespace("team-b", T0)
    assert (made.name, made.created_at) == ("team-b", T0)
    await store.put_namespace("team-a", T0 + 1)
    assert [n.name for n in await store.list_namespaces()] == ["default", "team-a", "team-b"]
    assert (await store.get_namespace("team-a")).created_at == T0 + 1
    await store.delete_namespace("team-b")
    assert [n.name for n in await store.list_namespaces()] == ["default", "team-a"]
    with pytest.raises(NotFoundError):
        await store.get_namespace("team-b")


async def test_a_namespace_is_created_once(store: Store) -> None:
    await store.put_namespace("x", T0)
    with pytest.raises(ConflictError):
        await store.put_namespace("x", T0 + 5)
    with pytest.raises(ConflictError):
        await store.put_namespace("default", T0)
    assert (await store.get_namespace("x")).created_at == T0


async def test_concurrent_creates_of_one_namespace_have_one_winner(
    store: Store, other: Store
) -> None:
    results = await asyncio.gather(
        *((store, other)[i % 2].put_namespace("race", T0 + i) for i in range(6)),
        return_exceptions=True,
    )
    made = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, ConflictError)]
    assert (len(made), len(refused)) == (1, 5)
    assert (await store.get_namespace("race")).created_at == made[0].created_at


async def test_unknown_namespaces_are_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.get_namespace("nope")
    with pytest.raises(NotFoundError):
        await store.delete_namespace("nope")


async def test_default_namespace_can_never_be_deleted(store: Store) -> None:
    with pytest.raises(ConflictError, match="cannot be deleted"):
        await store.delete_namespace("default")
    assert [n.name for n in await store.list_namespaces()] == ["default"]


async def _job(store: Store) -> None:
    spec = JobSpec(name="j", task="t", trigger={"kind": "every", "seconds": 10.0}, namespace="ns")
    await store.put_job(spec, T0 + 10, T0)


async def _run(store: Store) -> None:
    await store.defer([NewRun(task="t", queue="default", eta=T0, namespace="ns")], T0)


async def _topic(store: Store) -> None:
    event = NewEvent(id="e1", type="x", source="test", time=T0, data_json="{}")
    await store.append("orders", [event], T0, namespace="ns")


async def _subscription(store: Store) -> None:
    spec = SubscriptionSpec(name="s", topic="orders", target=dict(HOOK), namespace="ns")
    await store.put_subscription(spec, T0)


async def _token(store: Store) -> None:
    await store.put_token(token(namespaces=("other", "ns")))


USERS: dict[str, Callable[[Store], Awaitable[None]]] = {
    "jobs": _job,
    "runs": _run,
    "topics": _topic,
    "subscriptions": _subscription,
    "tokens": _token,
}


@pytest.mark.parametrize("kind", sorted(USERS))
async def test_a_namespace_in_use_cannot_be_deleted(store: Store, kind: str) -> None:
    await store.put_namespace("ns", T0)
    await USERS[kind](store)
    with pytest.raises(ConflictError, match=f"'ns' still holds {kind}"):
        await store.delete_namespace("ns", T0)
    assert (await store.get_namespace("ns")).name == "ns"


async def test_things_in_other_namespaces_do_not_keep_one(store: Store) -> None:
    await store.put_namespace("ns", T0)
    await store.put_job(
        JobSpec(name="j", task="t", trigger={"kind": "every", "seconds": 1.0}), None, T0
    )
    await store.defer([NewRun(task="t", queue="default", eta=T0)], T0)
    await store.put_token(token(1, namespaces=("*",)))
    await store.put_token(token(2, namespaces=("ns",), revoked_at=T0))
    await store.put_token(token(3, namespaces=("ns",), expires_at=T0 + 10))
    with pytest.raises(ConflictError, match="still holds tokens"):
        # Without now, a token that will expire still counts.
        await store.delete_namespace("ns")
    await store.delete_namespace("ns", T0 + 10)
    assert [n.name for n in await store.list_namespaces()] == ["default"]


# -- tokens --------------------------------------------------------------------------------------
async def test_put_get_and_find_a_token_by_hash(store: Store) -> None:
    stored = token(1, scope="admin", namespaces=("a", "b"), expires_at=T0 + 3600)
    await store.put_token(stored)
    assert await store.get_token(stored.id) == stored
    assert await store.token_by_hash(stored.hash) == stored
    assert await store.token_by_hash("f" * 64) is None
    with pytest.raises(NotFoundError):
        await store.get_token("000000000bad")


async def test_token_ids_and_hashes_are_unique(store: Store) -> None:
    await store.put_token(token(1))
    with pytest.raises(ConflictError):
        await store.put_token(token(2, id=token(1).id))
    with pytest.raises(ConflictError):
        await store.put_token(token(3, hash=token(1).hash))
    assert [t.id for t in await store.list_tokens()] == [token(1).id]


async def test_tokens_are_listed_oldest_first(store: Store) -> None:
    for n in (3, 1, 2):
        await store.put_token(token(n))
    assert [t.name for t in await store.list_tokens()] == ["token 1", "token 2", "token 3"]


async def test_revoking_keeps_the_first_revocation(store: Store) -> None:
    await store.put_token(token(1))
    revoked = await store.revoke_token(token(1).id, T0 + 10)
    assert revoked.revoked_at == T0 + 10
    assert not revoked.live(T0 + 11)
    again = await store.revoke_token(token(1).id, T0 + 20)
    assert again.revoked_at == T0 + 10
    assert (await store.token_by_hash(token(1).hash)) == again
    with pytest.raises(NotFoundError):
        await store.revoke_token("000000000bad", T0)


async def test_touch_writes_last_use_at_most_once_a_minute(store: Store) -> None:
    await store.put_token(token(1))
    await store.touch_token(token(1).id, T0 + 100)
    assert (await store.get_token(token(1).id)).last_used_at == T0 + 100
    await store.touch_token(token(1).id, T0 + 130)
    assert (await store.get_token(token(1).id)).last_used_at == T0 + 100
    await store.touch_token(token(1).id, T0 + 161)
    assert (await store.get_token(token(1).id)).last_used_at == T0 + 161
    await store.touch_token("000000000bad", T0)  # an unknown token is no error: nothing to note


# -- audit ---------------------------------------------------------------------------------------
async def test_audit_lists_newest_first_with_ids_in_order(store: Store) -> None:
    await store.record_audit([entry(1), entry(2, namespace=None, action="tokens.create")])
    await store.record_audit([entry(3, detail={"changes": {"paused": True}, "list": [1, 2]})])
    await store.record_audit([])
    listed = await store.list_audit()
    assert [e.resource for e in listed] == ["job-3", "job-2", "job-1"]
    assert listed[0].id > listed[1].id > listed[2].id > 0
    assert listed[0].detail == {"changes": {"paused": True}, "list": [1, 2]}
    assert listed[1] == replace(entry(2, namespace=None, action="tokens.create"), id=listed[1].id)


async def test_audit_pages_by_id(store: Store) -> None:
    await store.record_audit([entry(n) for n in range(1, 8)])
    first = await store.list_audit(limit=3)
    assert [e.resource for e in first] == ["job-7", "job-6", "job-5"]
    second = await store.list_audit(before_id=first[-1].id, limit=3)
    assert [e.resource for e in second] == ["job-4", "job-3", "job-2"]
    last = await store.list_audit(before_id=second[-1].id, limit=3)
    assert [e.resource for e in last] == ["job-1"]
    assert await store.list_audit(before_id=last[-1].id) == []


async def test_audit_filters_by_namespace(store: Store) -> None:
    await store.record_audit(
        [entry(1, "a"), entry(2, "b"), entry(3, None), entry(4, "c"), entry(5, "a")]
    )
    assert [e.resource for e in await store.list_audit("a")] == ["job-5", "job-1"]
    assert [e.resource for e in await store.list_audit(["a", "c"])] == ["job-5", "job-4", "job-1"]
    assert [e.resource for e in await store.list_audit({"b"})] == ["job-2"]
    assert await store.list_audit("zzz") == []
    assert await store.list_audit([]) == []
    page = await store.list_audit(["a", "b"], limit=2)
    assert [e.resource for e in page] == ["job-5", "job-2"]
    rest = await store.list_audit(["a", "b"], before_id=page[-1].id, limit=2)
    assert [e.resource for e in rest] == ["job-1"]


# -- idempotency ---------------------------------------------------------------------------------
async def test_first_claim_owns_the_key_and_repeats_see_it(store: Store) -> None:
    assert await store.claim_idempotency("tok", "POST /v1/jobs", "k1", "h1", T0) is None
    seen = await store.claim_idempotency("tok", "POST /v1/jobs", "k1", "h2", T0 + 1)
    assert seen is not None
    assert (seen.body_hash, seen.status, seen.response, seen.created_at) == ("h1", 0, None, T0)
    assert seen.in_progress
    answer = {"name": "j", "ids": [1, 2], "nested": {"ok": True}}
    assert await store.finish_idempotency("tok", "POST /v1/jobs", "k1", 201, answer)
    done = await store.claim_idempotency("tok", "POST /v1/jobs", "k1", "h1", T0 + 2)
    assert done is not None
    assert (done.status, done.response, done.in_progress) == (201, answer, False)


async def test_keys_are_scoped_by_token_and_route(store: Store) -> None:
    assert await store.claim_idempotency("tok", "POST /v1/jobs", "k", "h", T0) is None
    assert await store.claim_idempotency("other", "POST /v1/jobs", "k", "h", T0) is None
    assert await store.claim_idempotency("tok", "POST /v1/runs", "k", "h", T0) is None
    assert await store.claim_idempotency("tok", "POST /v1/jobs", "k", "h", T0) is not None


async def test_finishing_without_a_claim_is_refused(store: Store) -> None:
    assert not await store.finish_idempotency("tok", "POST /v1/jobs", "nope", 200, {})
    assert await store.claim_idempotency("tok", "POST /v1/jobs", "nope", "h", T0) is None


async def test_a_released_claim_can_be_claimed_again(store: Store) -> None:
    assert await store.claim_idempotency("tok", "r", "k", "h1", T0) is None
    assert await store.release_idempotency("tok", "r", "k")
    assert not await store.release_idempotency("tok", "r", "k")
    assert await store.claim_idempotency("tok", "r", "k", "h2", T0 + 1) is None
    again = await store.claim_idempotency("tok", "r", "k", "h1", T0 + 2)
    assert again is not None
    assert again.body_hash == "h2"


async def test_a_finished_answer_is_not_released(store: Store) -> None:
    assert await store.claim_idempotency("tok", "r", "k", "h", T0) is None
    assert await store.finish_idempotency("tok", "r", "k", 200, None)
    assert not await store.release_idempotency("tok", "r", "k")
    kept = await store.claim_idempotency("tok", "r", "k", "h", T0)
    assert kept is not None
    assert (kept.status, kept.response) == (200, None)


async def test_trim_deletes_old_records_finished_or_not(store: Store) -> None:
    await store.claim_idempotency("tok", "r", "old-done", "h", T0)
    await store.finish_idempotency("tok", "r", "old-done", 200, [1])
    await store.claim_idempotency("tok", "r", "old-open", "h", T0 + 1)
    await store.claim_idempotency("tok", "r", "new", "h", T0 + 100)
    assert await store.trim_idempotency(T0 + 50) == 2
    assert await store.trim_idempotency(T0 + 50) == 0
    assert await store.claim_idempotency("tok", "r", "old-done", "h", T0 + 200) is None
    assert await store.claim_idempotency("tok", "r", "new", "h", T0 + 200) is not None


async def test_concurrent_claims_have_exactly_one_owner(store: Store, other: Store) -> None:
    claims = 12
    for round_ in range(3):
        key = f"k{round_}"
        results = await asyncio.gather(
            *(
                (store, other)[i % 2].claim_idempotency("tok", "r", key, f"h{i}", T0 + i)
                for i in range(claims)
            )
        )
        owners = [i for i, r in enumerate(results) if r is None]
        assert len(owners) == 1
        seen = [r for r in results if r is not None]
        assert len(seen) == claims - 1
        # Every loser saw the owner's claim, in progress.
        assert {(r.body_hash, r.status) for r in seen} == {(f"h{owners[0]}", 0)}


# -- operations ----------------------------------------------------------------------------------
async def _operation(store: Store, namespace: str = "default", **kw: object) -> int:
    made = await store.put_operation(
        namespace=namespace,
        kind=str(kw.get("kind", "runs.retry")),
        request=kw.get("request", {"ids": [1, 2, 3]}),
        created_by="tok",
        now=T0,
        total=int(kw.get("total", 3)),  # type: ignore[call-overload]
    )
    return made.id


async def test_put_and_get_an_operation(store: Store) -> None:
    request = {"filter": {"states": ["dead"], "task": "t"}, "ids": None}
    made = await store.put_operation(
        namespace="ns", kind="dead_letters.requeue", request=request, created_by="tok", now=T0
    )
    assert made.id > 0
    assert (made.state, made.total, made.done, made.failed, made.error) == (
        OperationState.PENDING,
        0,
        0,
        0,
        None,
    )
    got = await store.get_operation(made.id)
    assert got == made
    assert (got.namespace, got.kind, got.request, got.created_by) == (
        "ns",
        "dead_letters.requeue",
        request,
        "tok",
    )
    assert (got.created_at, got.updated_at) == (T0, T0)
    with pytest.raises(NotFoundError):
        await store.get_operation(made.id + 1000)


async def test_progress_is_saved_field_by_field(store: Store) -> None:
    op = await _operation(store, total=0)
    running = await store.update_operation(op, T0 + 1, state=OperationState.RUNNING, total=10)
    assert (running.state, running.total, running.done, running.updated_at) == (
        OperationState.RUNNING,
        10,
        0,
        T0 + 1,
    )
    moved = await store.update_operation(op, T0 + 2, done=6, failed=1)
    assert (moved.state, moved.total, moved.done, moved.failed) == (
        OperationState.RUNNING,
        10,
        6,
        1,
    )
    ended = await store.update_operation(
        op, T0 + 3, state=OperationState.FAILED, done=9, error="run 7: boom"
    )
    assert (ended.state, ended.done, ended.failed, ended.error) == (
        OperationState.FAILED,
        9,
        1,
        "run 7: boom",
    )
    assert await store.get_operation(op) == ended


@pytest.mark.parametrize(
    "end", [OperationState.ABORTED, OperationState.SUCCEEDED, OperationState.FAILED]
)
async def test_an_ended_operation_is_not_moved_again(store: Store, end: OperationState) -> None:
    op = await _operation(store)
    await store.update_operation(op, T0 + 1, state=OperationState.RUNNING, done=1)
    ended = await store.update_operation(op, T0 + 2, state=end)
    assert end.terminal
    assert ended.state is end
    late = await store.update_operation(op, T0 + 3, state=OperationState.SUCCEEDED, done=3)
    assert late == ended
    assert (late.state, late.done, late.updated_at) == (end, 1, T0 + 2)


async def test_updating_an_unknown_operation_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.update_operation(424242, T0, done=1)


async def test_operations_list_newest_first_by_namespace(store: Store) -> None:
    ids = [await _operation(store, ns) for ns in ("a", "b", "a", "c", "a")]
    listed = await store.list_operations()
    assert [o.id for o in listed] == ids[::-1]
    assert [o.id for o in await store.list_operations("a")] == [ids[4], ids[2], ids[0]]
    assert [o.id for o in await store.list_operations(["b", "c"])] == [ids[3], ids[1]]
    assert [o.id for o in await store.list_operations("a", limit=2)] == [ids[4], ids[2]]
    deeper = await store.list_operations("a", limit=2, before_id=ids[2])
    assert [o.id for o in deeper] == [ids[0]]
    assert await store.list_operations("zzz") == []
    assert await store.list_operations(()) == []
