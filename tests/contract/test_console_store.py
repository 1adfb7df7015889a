"""The store contract for what the web console reads: queue depths by queue and live state, the
scheduler's lag from real job fires, each job's newest runs, payload matches in run listings
(JSON equality, positional arguments, with every other filter and the keyset), and a token's
``payloads`` flag."""

from __future__ import annotations

import json
import math

import pytest

from cronbus.admin_records import TokenRecord
from cronbus.distribution.fanout import map_children
from cronbus.errors import InvalidArgumentError
from cronbus.model import (
    JSON,
    ClaimedRun,
    ClaimRequest,
    Fire,
    Job,
    JobSpec,
    NewRun,
    Outcome,
    QueueDepth,
    QueueShare,
    RunFilter,
)
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store
from cronbus.store.logic import job_run

T0 = 1_700_000_000.0
EVERY = {"kind": "every", "seconds": 10.0}


def new(namespace: str = "a", queue: str = "q", **kw: object) -> NewRun:
    eta = kw.pop("eta", T0)
    task = kw.pop("task", "t")
    return NewRun(task=task, queue=queue, eta=eta, namespace=namespace, **kw)  # type: ignore[arg-type]


def claim(queue: str, tasks: list[str], limit: int = 1) -> ClaimRequest:
    return ClaimRequest(
        worker_id="w",
        queues=[QueueShare(name=queue, limit=limit)],
        limit=limit,
        lease_seconds=30.0,
        namespace="a",
        tasks=tasks,
    )


def succeeded(run: ClaimedRun) -> Outcome:
    return Outcome(run_id=run.run_id, attempt_id=run.attempt_id, outcome=AttemptOutcome.SUCCEEDED)


async def ids(store: Store, runs: list[NewRun], now: float = T0) -> list[int]:
    return [d.id for d in await store.defer(runs, now)]


async def a_job(store: Store, name: str, namespace: str = "a") -> Job:
    spec = JobSpec(name=name, task="t", trigger=EVERY, namespace=namespace)
    return await store.put_job(spec, T0 + 10, T0)


async def fire(store: Store, job: Job, fire_at: float, now: float) -> int:
    """Fire ``job`` as the scheduler does (its next fire must be ``fire_at``), creating its run
    at ``now``; the id of that run."""
    plan = Fire(
        job_id=job.id,
        expected=fire_at,
        next_fire_at=fire_at + 10,
        runs=[job_run(job, fire_at, fire_at)],
    )
    assert await store.fire([plan], now) == [True]
    runs = await store.list_runs(RunFilter(job_id=job.id, limit=1))
    assert runs[0].fire_at == fire_at
    return runs[0].id


# -- queue depths ----------------------------------------------------------------------------


async def test_queue_depths_count_live_states_per_queue(store: Store) -> None:
    assert await store.queue_depths("a") == []
    # q1: three queued (one due since T0 - 5), one scheduled; q2: one running, one cancelling,
    # and a fan-out parent waiting for its child (queued, in q3); ended runs are not counted.
    await ids(store, [new(queue="q1", eta=T0 - 5), new(queue="q1", eta=T0), new(queue="q1")])
    await ids(store, [new(queue="q1", eta=T0 + 100)])
    await ids(store, [new(queue="q2", eta=T0 - 1), new(queue="q2", eta=T0 - 2)])
    await ids(store, [new(queue="q2", task="body", eta=T0 - 3), new(queue="q2", eta=T0 - 4)])
    # Claimed earliest first: the run due at T0 - 4 runs, the one due at T0 - 2 is cancelled.
    (running, cancelling) = await store.claim(claim("q2", ["t"], limit=2), T0)
    assert (running.eta, cancelling.eta) == (T0 - 4, T0 - 2)
    assert await store.cancel(cancelling.run_id, T0) is RunState.CANCELLING
    (done,) = await store.claim(claim("q2", ["t"]), T0)
    await store.complete([succeeded(done)], T0 + 1)
    (parent,) = await store.claim(claim("q2", ["body"]), T0)
    calls = [(json.dumps([1]), "{}")]
    children = map_children(parent.run_id, new(queue="q3", task="item", eta=T0 + 1), 0, calls)
    await store.spawn(parent, children, None, T0 + 1)
    await store.complete([succeeded(parent)], T0 + 2)
    # Other namespaces are not counted.
    await ids(store, [new(namespace="b", queue="q1", eta=T0 - 50)])

    depths = await store.queue_depths("a")
    assert depths == [
        QueueDepth(queue="q1", state=RunState.SCHEDULED, count=1, oldest=T0 + 100),
        QueueDepth(queue="q1", state=RunState.QUEUED, count=3, oldest=T0 - 5),
        QueueDepth(queue="q2", state=RunState.RUNNING, count=1, oldest=T0 - 4),
        QueueDepth(queue="q2", state=RunState.CANCELLING, count=1, oldest=T0 - 2),
        QueueDepth(queue="q2", state=RunState.WAITING, count=1, oldest=T0 - 3),
        QueueDepth(queue="q3", state=RunState.QUEUED, count=1, oldest=T0 + 1),
    ]
    assert await store.queue_depths("b") == [
        QueueDepth(queue="q1", state=RunState.QUEUED, count=1, oldest=T0 - 50)
    ]
    assert await store.queue_depths("nobody") == []


# -- fire lags -------------------------------------------------------------------------------


async def test_fire_lags_are_how_late_job_runs_were_created_newest_first(store: Store) -> None:
    job = await a_job(store, "j")
    await fire(store, job, T0 + 10, T0 + 12)  # 2 s late
    await fire(store, job, T0 + 20, T0 + 20.5)  # 0.5 s late
    await fire(store, job, T0 + 30, T0 + 37.25)  # 7.25 s late
    # Runs not fired by a job, and job runs of another namespace, are no lag of "a".
    await ids(store, [new(eta=T0 + 40)], now=T0 + 40)
    other = await a_job(store, "other", namespace="b")
    await fire(store, other, T0 + 10, T0 + 100)

    assert await store.fire_lags("a", T0) == [7.25, 0.5, 2.0]
    assert await store.fire_lags("a", T0 + 20.5) == [7.25, 0.5]  # created at `since` counts
    assert await store.fire_lags("a", T0, limit=2) == [7.25, 0.5]
    assert await store.fire_lags("a", T0 + 38) == []
    assert await store.fire_lags("a", T0, limit=0) == []
    assert await store.fire_lags("b", T0) == [90.0]


# -- recent job runs -------------------------------------------------------------------------


async def test_recent_job_runs_are_each_jobs_newest_runs(store: Store) -> None:
    one, two, idle = [await a_job(store, name) for name in ("one", "two", "idle")]
    other = await a_job(store, "other", namespace="b")
    first = await fire(store, one, T0 + 10, T0 + 10)
    second = await fire(store, two, T0 + 10, T0 + 10)
    third = await fire(store, one, T0 + 20, T0 + 20)
    fourth = await fire(store, one, T0 + 30, T0 + 30)
    await fire(store, other, T0 + 10, T0 + 10)
    assert await store.cancel(third, T0 + 31) is RunState.CANCELLED
    assert first < third < fourth

    got = await store.recent_job_runs("a", [one.id, two.id, idle.id, other.id], per_job=2)
    assert got == {
        one.id: [(fourth, RunState.QUEUED), (third, RunState.CANCELLED)],
        two.id: [(second, RunState.QUEUED)],
        idle.id: [],
        other.id: [],  # a job of another namespace shows nothing here
    }
    assert await store.recent_job_runs("a", [one.id], per_job=5) == {
        one.id: [
            (fourth, RunState.QUEUED),
            (third, RunState.CANCELLED),
            (first, RunState.QUEUED),
        ]
    }
    assert await store.recent_job_runs("a", [one.id], per_job=0) == {one.id: []}
    assert await store.recent_job_runs("a", [], per_job=3) == {}
    with pytest.raises(InvalidArgumentError, match="per_job"):
        await store.recent_job_runs("a", [one.id], per_job=-1)


# -- payload matches -------------------------------------------------------------------------

KWARGS: list[JSON] = [
    42,
    42.0,
    "42",
    True,
    1,
    None,
    {"a": 1, "b": [1, 2]},
    "{}",
    "[1, 2]",
    'Ada "Lovelace" ü',
    [1, 2],
]


async def payload_runs(store: Store) -> dict[str, int]:
    """One run per value of ``user`` (by its JSON text), one without ``user``, one with only
    positional arguments."""
    runs = [new(kwargs_json=json.dumps({"user": value})) for value in KWARGS]
    runs.append(new(kwargs_json=json.dumps({"other": 42})))
    runs.append(new(args_json=json.dumps(["x", 42, {"k": None}])))
    made = await ids(store, runs)
    names = [json.dumps(value) for value in KWARGS] + ["missing", "positional"]
    return dict(zip(names, made, strict=True))


async def matching(store: Store, *args: tuple[str, JSON], **kw: object) -> list[int]:
    runs = await store.list_runs(RunFilter(namespace="a", args=args, **kw))  # type: ignore[arg-type]
    return [run.id for run in runs]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (42, ["42", "42.0"]),  # JSON numbers: 42 is 42.0
        (42.0, ["42", "42.0"]),
        ("42", ['"42"']),  # never the number
        (True, ["true"]),  # never 1
        (1, ["1"]),  # never true
        (None, ["null"]),  # never a missing key
        ({"b": [1, 2], "a": 1}, ['{"a": 1, "b": [1, 2]}']),  # whatever the key order
        ({"a": 1}, []),  # a key short
        ({"a": 1, "b": [2, 1]}, []),  # arrays in order
        ({"a": 1, "b": [1, 2], "c": 3}, []),  # a key more
        ({}, []),  # not the string "{}"
        ([1, 2], ["[1, 2]"]),  # not the string "[1, 2]"
        ([1], []),
        ('Ada "Lovelace" ü', ['"Ada \\"Lovelace\\" \\u00fc"']),
        (43, []),
    ],
)
async def test_a_payload_match_is_json_equality(
    store: Store, value: JSON, expected: list[str]
) -> None:
    made = await payload_runs(store)
    want = sorted((made[name] for name in expected), reverse=True)
    assert await matching(store, ("user", value)) == want


async def test_a_nested_match_is_json_equality_at_every_level(store: Store) -> None:
    # Lists and objects are compared whole (SQLite: in Python, not one SQL level per level).
    stored = {"user": [True, 42, {"b": [None, "x"], "a": 1.5}]}
    (run_id,) = await ids(store, [new(kwargs_json=json.dumps(stored))])
    assert await matching(store, ("user", [True, 42.0, {"a": 1.5, "b": [None, "x"]}])) == [run_id]
    assert await matching(store, ("user", [1, 42, {"a": 1.5, "b": [None, "x"]}])) == []
    assert await matching(store, ("user", [True, 42, {"a": 1.5, "b": ["x", None]}])) == []
    assert await matching(store, ("user", [True, 42, {"a": 1.5, "b": [None, "x"], "c": 0}])) == []
    deep: JSON = 1
    for _ in range(100):  # as deep as an argument may nest
        deep = [deep]
    (deep_id,) = await ids(store, [new(args_json=json.dumps([deep]))])
    assert await matching(store, ("0", deep)) == [deep_id]


async def test_a_key_of_digits_matches_a_positional_argument(store: Store) -> None:
    made = await payload_runs(store)
    positional = [made["positional"]]
    assert await matching(store, ("0", "x")) == positional
    assert await matching(store, ("1", 42)) == positional
    assert await matching(store, ("1", "42")) == []
    assert await matching(store, ("2", {"k": None})) == positional
    assert await matching(store, ("3", None)) == []  # beyond the arguments given
    assert await matching(store, ("0", "x"), ("1", 42)) == positional
    assert await matching(store, ("0", "x"), ("1", 41)) == []  # every match must hold
    assert await matching(store, ("other", 42)) == [made["missing"]]


async def test_payload_matches_combine_with_filters_and_the_keyset(store: Store) -> None:
    # Five runs of user 7 among others; two of them cancelled, one of them of task "u".
    mine = await ids(
        store,
        [new(kwargs_json=json.dumps({"user": 7}), task=t) for t in ("t", "u", "t", "t", "t")],
    )
    await ids(store, [new(kwargs_json=json.dumps({"user": 8})) for _ in range(3)])
    await ids(store, [new(namespace="b", kwargs_json=json.dumps({"user": 7}))])
    for run_id in (mine[1], mine[3]):
        assert await store.cancel(run_id, T0) is RunState.CANCELLED

    newest = sorted(mine, reverse=True)
    pages = []
    before: int | None = None
    while True:
        page = await matching(store, ("user", 7), limit=2, before_id=before)
        if not page:
            break
        pages.append(page)
        before = page[-1]
    assert pages == [newest[:2], newest[2:4], newest[4:]]

    cancelled = [mine[3], mine[1]]
    assert await matching(store, ("user", 7), states=[RunState.CANCELLED]) == cancelled
    queued_or_cancelled = [RunState.QUEUED, RunState.CANCELLED]
    assert await matching(store, ("user", 7), states=queued_or_cancelled, limit=3) == newest[:3]
    assert await matching(
        store, ("user", 7), states=queued_or_cancelled, limit=2, before_id=mine[3]
    ) == [mine[2], mine[1]]
    assert await matching(store, ("user", 7), task="u") == [mine[1]]
    assert await matching(store, ("user", 7), queue="q", limit=1) == [mine[4]]
    assert await matching(store, ("user", 7), created_after=T0, created_before=T0 + 1) == newest
    assert await matching(store, ("user", 7), created_after=T0 + 1) == []
    # Every namespace: one range per namespace, merged.
    everywhere = await store.list_runs(RunFilter(args=[("user", 7)]))
    assert len(everywhere) == 6
    assert {run.namespace for run in everywhere} == {"a", "b"}
    assert await matching(store, ("user", 9)) == []


async def test_a_payload_holding_nul_is_matched_by_its_other_values(store: Store) -> None:
    # PostgreSQL's JSON functions refuse a document with an escaped NUL anywhere in it, SQLite's
    # end a string there: both stores read a NUL as U+FFFD (no match holds one).
    (run_id,) = await ids(
        store,
        [new(args_json=json.dumps(["a\x00", 3]), kwargs_json=json.dumps({"user": 7, "b": "\x00"}))],
    )
    await ids(store, [new(kwargs_json=json.dumps({"user": 7, "b": "\\u0000"}))])
    assert await matching(store, ("user", 7), ("1", 3)) == [run_id]
    assert await matching(store, ("b", "\\u0000")) == [run_id + 1]  # backslash, not NUL
    assert await matching(store, ("b", "")) == []
    assert await matching(store, ("b", "\ufffd")) == [run_id]  # both stores read NUL so
    assert await matching(store, ("0", "a\ufffd")) == [run_id]


@pytest.mark.parametrize(
    ("match", "message"),
    [
        (("", 1), "non-empty string"),
        (("a\x00", 1), "without NUL"),
        (("x", math.nan), "not a JSON number"),
        (("x", math.inf), "not a JSON number"),
        (("x", 2**63), "beyond 64-bit"),
        (("x", "a\x00b"), "NUL"),
        (("x", {1: 2}), "object keys must be strings"),
        (("x", [object()]), "not a JSON value"),
        (("2147483648", 1), "positional index"),
    ],
)
def test_a_match_no_payload_could_equal_is_refused(match: tuple[str, JSON], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        RunFilter(args=[match])


@pytest.mark.parametrize("depth", [101, 5000])
def test_a_match_deeper_than_an_argument_is_refused(depth: int) -> None:
    # Deeper than an argument may nest (MAX_DEPTH, 100); found without recursing, so at any
    # depth (5000 would overflow a recursive walk with a RecursionError).
    value: JSON = []
    for _ in range(depth - 1):
        value = [value]
    with pytest.raises(InvalidArgumentError, match="nests more than 100 levels deep"):
        RunFilter(args=[("x", value)])


# -- tokens ----------------------------------------------------------------------------------


def token(id: str, **kw: object) -> TokenRecord:
    return TokenRecord(
        id=id,
        name=f"token {id}",
        hash=f"hash-{id}",
        scope="read",
        namespaces=("a",),
        created_at=T0,
        created_by="local",
        **kw,  # type: ignore[arg-type]
    )


async def test_a_tokens_payloads_flag_is_kept(store: Store) -> None:
    await store.put_token(token("seeing"))
    await store.put_token(token("blind", payloads=False))
    assert (await store.get_token("seeing")).payloads is True
    assert (await store.get_token("blind")).payloads is False
    by_hash = await store.token_by_hash("hash-blind")
    assert by_hash is not None
    assert by_hash.payloads is False
    assert [(t.id, t.payloads) for t in await store.list_tokens()] == [
        ("blind", False),
        ("seeing", True),
    ]
    revoked = await store.revoke_token("blind", T0 + 1)
    assert (revoked.revoked_at, revoked.payloads) == (T0 + 1, False)
