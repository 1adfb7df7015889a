"""The store contract for connectors (both stores): definitions, task commands, task leases
fenced by an epoch, and commits that write a source's events and positions in one transaction.
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from cronbus.connectors.records import (
    Commit,
    Connector,
    ConnectorLease,
    ConnectorSpec,
    Direction,
    NewDeadRecord,
    TaskCounts,
    Tolerance,
)
from cronbus.connectors.states import TaskEvent, TaskState
from cronbus.errors import (
    ConflictError,
    ConnectorExistsError,
    ConnectorNotFoundError,
    InvalidArgumentError,
    InvalidTransitionError,
)
from cronbus.events.records import NewEvent
from cronbus.store import Store, open_store
from cronbus.store.connector_ports import CONNECTORS_CHANNEL, ConnectorStore
from cronbus.store.fencing import CALLER_CLOCK
from cronbus.store.ports import EVENTS_CHANNEL
from cronbus.store.postgres import PostgresStore

T0 = 1_700_000_000.0
LEASE = 30.0
S = TaskState
E = TaskEvent
Key = tuple[str, int]


@pytest.fixture
def cs(store: Store) -> ConnectorStore:
    return cast(ConnectorStore, store)


async def second(store: Store) -> Store:
    """Another store object (its own connections) on the contract store, on the same clock."""
    other = open_store(store.url)
    if isinstance(other, PostgresStore):
        other.lease_clock = CALLER_CLOCK
    await other.open()
    return other


def spec(
    name: str = "c", topic: str = "orders", namespace: str = "default", **kw: object
) -> ConnectorSpec:
    config = {"topic": topic, "path": kw.pop("path", "/data")}
    return ConnectorSpec(
        name=name,
        kind="demo",
        direction=Direction.SOURCE,
        topic=topic,
        config=config,
        namespace=namespace,
        **kw,  # type: ignore[arg-type]
    )


async def make(
    cs: ConnectorStore, name: str = "c", tasks: int = 2, now: float = T0, **kw: object
) -> Connector:
    configs = [{"part": i} for i in range(tasks)]
    connector, created = await cs.create_connector(spec(name, **kw), configs, now)
    assert created
    return connector


async def take(
    cs: ConnectorStore, holder: str = "w1", now: float = T0, limit: int = 10
) -> dict[Key, ConnectorLease]:
    leases = await cs.acquire_connector_tasks(holder, now, LEASE, limit)
    assert all(lease.holder == holder for lease in leases)
    return {(lease.connector, lease.task): lease for lease in leases}


def event(i: int | str) -> NewEvent:
    return NewEvent(
        id=f"e{i}", type="row.read", source="demo", time=T0, data_json=f'{{"n": "{i}"}}'
    )


async def states(cs: ConnectorStore, name: str = "c") -> list[TaskState]:
    return [t.state for t in (await cs.get_connector(name)).tasks]


# -- definitions ---------------------------------------------------------------------------------
async def test_create_makes_one_unassigned_task_per_config(cs: ConnectorStore) -> None:
    connector, created = await cs.create_connector(
        spec(tolerance=Tolerance.ALL, max_tasks=3), [{"part": 0}, {"part": 1}, {"part": 2}], T0
    )
    assert created
    assert connector.spec == spec(tolerance=Tolerance.ALL, max_tasks=3)
    assert (connector.created_at, connector.updated_at) == (T0, T0)
    assert [t.index for t in connector.tasks] == [0, 1, 2]
    assert [t.config for t in connector.tasks] == [{"part": 0}, {"part": 1}, {"part": 2}]
    for task in connector.tasks:
        assert task.connector == "c"
        assert task.state is S.UNASSIGNED
        assert (task.holder, task.lease_expires_at, task.error) == (None, None, None)
        assert task.positions == {}
        assert task.counts == TaskCounts()
    assert await cs.get_connector("c") == connector


async def test_create_with_the_same_fingerprint_returns_the_stored_connector(
    cs: ConnectorStore,
) -> None:
    first = await make(cs)
    again, created = await cs.create_connector(spec(), [{"other": True}], T0 + 60)
    assert not created
    assert again == first
    assert await cs.get_connector("c") == first


async def test_create_with_another_config_under_the_same_name_is_refused(
    cs: ConnectorStore,
) -> None:
    first = await make(cs)
    with pytest.raises(ConnectorExistsError):
        await cs.create_connector(spec(path="/elsewhere"), [{"part": 0}], T0 + 1)
    with pytest.raises(ConnectorExistsError):
        await cs.create_connector(spec(namespace="team"), [{"part": 0}], T0 + 1)
    assert await cs.get_connector("c") == first


async def test_concurrent_creates_of_one_spec_create_it_once(store: Store) -> None:
    other = await second(store)
    try:
        stores = [cast(ConnectorStore, store), cast(ConnectorStore, other)]
        outcomes = await asyncio.gather(
            *(stores[i % 2].create_connector(spec(), [{"part": 0}], T0 + i) for i in range(6))
        )
    finally:
        await other.close()
    assert sum(created for _, created in outcomes) == 1
    assert all(connector == outcomes[0][0] for connector, _ in outcomes)
    assert len(outcomes[0][0].tasks) == 1


async def test_get_and_list_connectors(cs: ConnectorStore) -> None:
    await make(cs, "b", tasks=1)
    await make(cs, "a", tasks=2, namespace="team", topic="team-orders")
    await make(cs, "c", tasks=0)
    assert [c.name for c in await cs.list_connectors()] == ["a", "b", "c"]
    assert [len(c.tasks) for c in await cs.list_connectors()] == [2, 1, 0]
    assert [c.name for c in await cs.list_connectors(namespace="team")] == ["a"]
    assert [c.name for c in await cs.list_connectors(namespace="default")] == ["b", "c"]
    assert await cs.list_connectors(namespace="nobody") == []
    assert (await cs.get_connector("a")).spec.namespace == "team"
    with pytest.raises(ConnectorNotFoundError):
        await cs.get_connector("missing")


# -- commands ------------------------------------------------------------------------------------
async def test_pause_and_resume_every_task(cs: ConnectorStore) -> None:
    await make(cs, tasks=3)
    paused = await cs.command_tasks("c", E.PAUSE, T0 + 1)
    assert [t.state for t in paused.tasks] == [S.PAUSED] * 3
    assert paused.updated_at == T0 + 1
    assert await take(cs) == {}
    resumed = await cs.command_tasks("c", E.RESUME, T0 + 2)
    assert [t.state for t in resumed.tasks] == [S.UNASSIGNED] * 3
    assert sorted(await take(cs)) == [("c", 0), ("c", 1), ("c", 2)]


async def test_a_command_on_one_task_changes_that_task_only(cs: ConnectorStore) -> None:
    await make(cs, tasks=3)
    connector = await cs.command_tasks("c", E.STOP, T0 + 1, task=1)
    assert [t.state for t in connector.tasks] == [S.UNASSIGNED, S.STOPPED, S.UNASSIGNED]
    assert connector.tasks[1].updated_at == T0 + 1
    assert connector.tasks[0].updated_at == T0
    assert sorted(await take(cs)) == [("c", 0), ("c", 2)]


async def test_a_command_not_allowed_on_a_named_task_is_refused(cs: ConnectorStore) -> None:
    await make(cs, tasks=2)
    await take(cs)
    before = await cs.get_connector("c")
    with pytest.raises(InvalidTransitionError):
        await cs.command_tasks("c", E.RESUME, T0 + 1, task=0)
    assert await cs.get_connector("c") == before


async def test_a_command_on_every_task_skips_those_it_does_not_apply_to(
    cs: ConnectorStore,
) -> None:
    await make(cs, tasks=3)
    await cs.command_tasks("c", E.PAUSE, T0 + 1, task=0)
    await cs.command_tasks("c", E.STOP, T0 + 1, task=2)
    leases = await take(cs, now=T0 + 2)
    assert list(leases) == [("c", 1)]
    connector = await cs.command_tasks("c", E.RESUME, T0 + 3)
    assert [t.state for t in connector.tasks] == [S.UNASSIGNED, S.RUNNING, S.UNASSIGNED]
    assert connector.tasks[1].holder == "w1"
    assert connector.tasks[1].epoch == leases["c", 1].epoch
    assert await cs.commit_task(leases["c", 1], Commit(positions={"p": 1}), T0 + 4)


async def test_leaving_running_drops_the_holder_and_fences_it(cs: ConnectorStore) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    paused = await cs.command_tasks("c", E.PAUSE, T0 + 1)
    task = paused.tasks[0]
    assert task.state is S.PAUSED
    assert (task.holder, task.lease_expires_at) == (None, None)
    assert task.epoch > lease.epoch
    assert not await cs.commit_task(lease, Commit(positions={"p": 1}), T0 + 2)
    assert await take(cs, now=T0 + 2) == {}
    assert (await cs.get_connector("c")).tasks[0].positions == {}


async def test_stopped_tasks_stay_parked_until_resumed(cs: ConnectorStore) -> None:
    await make(cs, tasks=2)
    lease = (await take(cs, limit=1))["c", 0]
    stopped = await cs.command_tasks("c", E.STOP, T0 + 1)
    assert [t.state for t in stopped.tasks] == [S.STOPPED, S.STOPPED]
    assert stopped.tasks[0].epoch > lease.epoch
    assert await take(cs, now=T0 + 100) == {}
    await cs.command_tasks("c", E.RESUME, T0 + 101)
    retaken = await take(cs, now=T0 + 102)
    assert sorted(retaken) == [("c", 0), ("c", 1)]
    assert retaken["c", 0].epoch > stopped.tasks[0].epoch


async def test_restart_clears_the_error_and_fences_the_holder(cs: ConnectorStore) -> None:
    await make(cs, tasks=2)
    leases = await take(cs)
    assert await cs.fail_connector_task(leases["c", 0], "disk full", T0 + 1)
    restarted = await cs.command_tasks("c", E.RESTART, T0 + 2)
    assert [t.state for t in restarted.tasks] == [S.UNASSIGNED, S.UNASSIGNED]
    assert [t.error for t in restarted.tasks] == [None, None]
    assert restarted.tasks[1].epoch > leases["c", 1].epoch
    assert not await cs.commit_task(leases["c", 1], Commit(positions={"p": 1}), T0 + 3)
    # The old holder gets the task back only under a new epoch: its old lease stays fenced.
    again = await take(cs, now=T0 + 3)
    assert again["c", 1].epoch > restarted.tasks[1].epoch
    assert not await cs.commit_task(leases["c", 1], Commit(), T0 + 4)


async def test_a_task_keeps_its_error_only_while_failed(cs: ConnectorStore) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    assert await cs.fail_connector_task(lease, "bad row", T0 + 1)
    assert (await cs.get_connector("c")).tasks[0].error == "bad row"
    paused = await cs.command_tasks("c", E.PAUSE, T0 + 2)
    assert (paused.tasks[0].state, paused.tasks[0].error) == (S.PAUSED, None)


async def test_commands_refuse_unknown_connectors_tasks_and_events(cs: ConnectorStore) -> None:
    before = await make(cs, tasks=2)
    with pytest.raises(ConnectorNotFoundError):
        await cs.command_tasks("missing", E.PAUSE, T0)
    with pytest.raises(InvalidArgumentError):
        await cs.command_tasks("c", E.PAUSE, T0, task=2)
    with pytest.raises(InvalidArgumentError):
        await cs.command_tasks("c", E.PAUSE, T0, task=-1)
    for event in (E.ASSIGN, E.LOSE, E.FAIL):
        with pytest.raises(InvalidArgumentError):
            await cs.command_tasks("c", event, T0)
    assert await cs.get_connector("c") == before


async def test_create_and_commands_wake_connector_listeners(
    store: Store, cs: ConnectorStore
) -> None:
    listener = await store.listen([CONNECTORS_CHANNEL])
    try:
        assert not await listener.wait(0.05)
        await make(cs)
        assert await listener.wait(5.0)
        await cs.command_tasks("c", E.PAUSE, T0 + 1)
        assert await listener.wait(5.0)
    finally:
        await listener.close()


# -- leases --------------------------------------------------------------------------------------
async def test_acquire_takes_unassigned_tasks_oldest_first_up_to_limit(
    cs: ConnectorStore,
) -> None:
    await make(cs, "b", tasks=2, now=T0)
    await make(cs, "a", tasks=2, now=T0 + 1)
    first = await take(cs, "w1", now=T0 + 2, limit=3)
    assert sorted(first) == [("a", 0), ("b", 0), ("b", 1)]
    lease = first["b", 0]
    assert (lease.expires_at, lease.epoch) == (T0 + 2 + LEASE, 1)
    task = (await cs.get_connector("b")).tasks[0]
    assert (task.state, task.holder, task.epoch) == (S.RUNNING, "w1", 1)
    assert task.lease_expires_at == T0 + 2 + LEASE
    assert sorted(await take(cs, "w2", now=T0 + 2, limit=3)) == [("a", 1)]


async def test_acquire_renews_the_holders_leases_without_bumping_the_epoch(
    cs: ConnectorStore,
) -> None:
    await make(cs, tasks=2)
    first = await take(cs, limit=1)
    renewed = await take(cs, now=T0 + 10, limit=1)
    assert list(renewed) == [("c", 0)]
    assert renewed["c", 0].epoch == first["c", 0].epoch
    assert renewed["c", 0].expires_at == T0 + 10 + LEASE
    assert (await cs.get_connector("c")).tasks[0].lease_expires_at == T0 + 10 + LEASE
    # With more room the holder keeps what it has and takes more.
    assert sorted(await take(cs, now=T0 + 11, limit=5)) == [("c", 0), ("c", 1)]


async def test_an_expired_lease_is_taken_over_and_fences_the_old_holder(
    store: Store, cs: ConnectorStore
) -> None:
    await make(cs, tasks=1)
    old = (await take(cs, "w1"))["c", 0]
    assert await take(cs, "w2", now=T0 + LEASE - 1) == {}
    new = (await take(cs, "w2", now=T0 + LEASE + 1))["c", 0]
    assert new.epoch > old.epoch
    task = (await cs.get_connector("c")).tasks[0]
    assert (task.state, task.holder, task.epoch) == (S.RUNNING, "w2", new.epoch)
    commit = Commit(positions={"p": 9}, counts=TaskCounts(delivered=1))
    assert await cs.append_from_source(old, [event(1)], commit, T0 + LEASE + 2) is None
    assert not await cs.commit_task(old, commit, T0 + LEASE + 2)
    assert not await cs.fail_connector_task(old, "late", T0 + LEASE + 2)
    assert await take(cs, "w1", now=T0 + LEASE + 2) == {}
    assert await store.read_events("orders", 0, 10) == []
    task = (await cs.get_connector("c")).tasks[0]
    assert (task.state, task.positions, task.counts) == (S.RUNNING, {}, TaskCounts())


async def test_an_expired_lease_nobody_took_still_holds(cs: ConnectorStore) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    later = T0 + LEASE * 3
    assert await cs.commit_task(lease, Commit(positions={"p": 1}), later)
    renewed = await take(cs, now=later)
    assert renewed["c", 0].epoch == lease.epoch


async def test_acquire_never_takes_paused_stopped_or_failed_tasks(cs: ConnectorStore) -> None:
    await make(cs, tasks=4)
    failing = (await take(cs, "w0", limit=1))["c", 0]
    assert await cs.fail_connector_task(failing, "broken", T0)
    await cs.command_tasks("c", E.PAUSE, T0, task=1)
    await cs.command_tasks("c", E.STOP, T0, task=2)
    assert await states(cs) == [S.FAILED, S.PAUSED, S.STOPPED, S.UNASSIGNED]
    assert list(await take(cs, "w1", now=T0 + 1000)) == [("c", 3)]
    assert list(await take(cs, "w2", now=T0 + 2000)) == [("c", 3)]


async def test_concurrent_acquires_never_share_a_task(store: Store) -> None:
    other = await second(store)
    try:
        stores = [cast(ConnectorStore, store), cast(ConnectorStore, other)]
        await make(stores[0], "a", tasks=5)
        await make(stores[0], "b", tasks=5)
        rounds = await asyncio.gather(
            *(stores[i % 2].acquire_connector_tasks(f"w{i}", T0, LEASE, 3) for i in range(6))
        )
    finally:
        await other.close()
    taken = [(lease.connector, lease.task) for leases in rounds for lease in leases]
    assert len(taken) == len(set(taken)) == 10
    assert all(len(leases) <= 3 for leases in rounds)


async def test_release_gives_tasks_back_at_once(cs: ConnectorStore) -> None:
    await make(cs, tasks=2)
    leases = await take(cs, "w1")
    await cs.release_connector_tasks(list(leases.values()), T0 + 1)
    connector = await cs.get_connector("c")
    assert [t.state for t in connector.tasks] == [S.UNASSIGNED, S.UNASSIGNED]
    assert [t.holder for t in connector.tasks] == [None, None]
    assert not await cs.commit_task(leases["c", 0], Commit(), T0 + 2)
    retaken = await take(cs, "w2", now=T0 + 2)
    assert sorted(retaken) == [("c", 0), ("c", 1)]
    # A stale release leaves the new holder's tasks alone.
    await cs.release_connector_tasks(list(leases.values()), T0 + 3)
    assert await states(cs) == [S.RUNNING, S.RUNNING]
    assert await cs.commit_task(retaken["c", 0], Commit(), T0 + 3)


async def test_fail_records_why_and_is_fenced(cs: ConnectorStore) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    assert await cs.fail_connector_task(lease, "cannot parse line 3", T0 + 1)
    task = (await cs.get_connector("c")).tasks[0]
    assert (task.state, task.error, task.holder) == (S.FAILED, "cannot parse line 3", None)
    assert not await cs.fail_connector_task(lease, "again", T0 + 2)
    assert not await cs.commit_task(lease, Commit(positions={"p": 1}), T0 + 2)
    assert (await cs.get_connector("c")).tasks[0].error == "cannot parse line 3"


# -- commits -------------------------------------------------------------------------------------
async def test_append_from_source_writes_events_positions_counts_and_dead_records(
    store: Store, cs: ConnectorStore
) -> None:
    await make(cs, tasks=2, namespace="team", topic="rows")
    lease = (await take(cs))["c", 1]
    dead = NewDeadRecord(record={"line": "???"}, error="unparsable", partition="f1")
    commit = Commit(
        positions={"f1": 2, "f2": {"line": 7}},
        dead=(dead,),
        counts=TaskCounts(delivered=2, dead=1, retried=3),
    )
    appended = await cs.append_from_source(lease, [event(1), event(2)], commit, T0 + 1)
    assert appended is not None
    assert [(a.id, a.offset, a.created) for a in appended] == [("e1", 1, True), ("e2", 2, True)]
    assert [e.id for e in await store.read_events("rows", 0, 10)] == ["e1", "e2"]
    assert (await store.get_topic("rows")).namespace == "team"
    connector = await cs.get_connector("c")
    task = connector.tasks[1]
    assert task.positions == {"f1": 2, "f2": {"line": 7}}
    assert task.counts == TaskCounts(delivered=2, dead=1, retried=3)
    assert task.updated_at == T0 + 1
    assert connector.tasks[0].positions == {}
    (stored,) = await cs.list_dead_records("c")
    assert (stored.connector, stored.task, stored.record) == ("c", 1, {"line": "???"})
    assert (stored.error, stored.partition, stored.offset) == ("unparsable", "f1", None)
    assert stored.created_at == T0 + 1


async def test_positions_merge_partition_by_partition(cs: ConnectorStore) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    first = Commit(
        positions={"a": {"file": "x", "line": 3}, "b": 1}, counts=TaskCounts(delivered=1)
    )
    assert await cs.append_from_source(lease, [event(1)], first, T0 + 1) is not None
    second = Commit(positions={"a": {"file": "y"}, "c": "z"}, counts=TaskCounts(delivered=2))
    assert await cs.commit_task(lease, second, T0 + 2)
    task = (await cs.get_connector("c")).tasks[0]
    # A partition's new position replaces the old one whole, even when both are objects.
    assert task.positions == {"a": {"file": "y"}, "b": 1, "c": "z"}
    assert task.counts == TaskCounts(delivered=3)


async def test_a_repeated_event_id_is_stored_once(store: Store, cs: ConnectorStore) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    assert await cs.append_from_source(lease, [event(1)], Commit(), T0 + 1) is not None
    appended = await cs.append_from_source(lease, [event(1), event(2)], Commit(), T0 + 2)
    assert appended is not None
    assert [(a.offset, a.created) for a in appended] == [(1, False), (2, True)]
    assert [e.id for e in await store.read_events("orders", 0, 10)] == ["e1", "e2"]


async def test_append_from_source_after_a_restart_writes_nothing(
    store: Store, cs: ConnectorStore
) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    await cs.command_tasks("c", E.RESTART, T0 + 1)
    retaken = await take(cs, now=T0 + 2)
    commit = Commit(
        positions={"p": 5},
        dead=(NewDeadRecord(record={"n": 1}, error="bad"),),
        counts=TaskCounts(delivered=1),
    )
    assert await cs.append_from_source(lease, [event(1)], commit, T0 + 3) is None
    assert await store.read_events("orders", 0, 10) == []
    task = (await cs.get_connector("c")).tasks[0]
    assert (task.positions, task.counts, task.epoch) == ({}, TaskCounts(), retaken["c", 0].epoch)
    assert await cs.list_dead_records("c") == []


async def test_a_topic_of_another_namespace_is_a_conflict_and_nothing_is_written(
    store: Store, cs: ConnectorStore
) -> None:
    await store.append("orders", [event("theirs")], T0, namespace="other")
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    commit = Commit(
        positions={"p": 5},
        dead=(NewDeadRecord(record={"n": 1}, error="bad"),),
        counts=TaskCounts(delivered=1),
    )
    with pytest.raises(ConflictError):
        await cs.append_from_source(lease, [event(1)], commit, T0 + 1)
    assert [e.id for e in await store.read_events("orders", 0, 10)] == ["etheirs"]
    task = (await cs.get_connector("c")).tasks[0]
    assert (task.positions, task.counts) == ({}, TaskCounts())
    assert await cs.list_dead_records("c") == []


async def test_append_from_source_wakes_listeners_of_the_events_channel(
    store: Store, cs: ConnectorStore
) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    listener = await store.listen([EVENTS_CHANNEL])
    try:
        assert await cs.append_from_source(lease, [event(1)], Commit(), T0 + 1) is not None
        assert await listener.wait(5.0)
    finally:
        await listener.close()


async def test_commit_task_applies_a_sinks_commit_and_is_fenced(cs: ConnectorStore) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    dead = NewDeadRecord(record={"id": "e7"}, error="HTTP 400", offset=7)
    commit = Commit(positions={"orders": 7}, dead=(dead,), counts=TaskCounts(delivered=6, dead=1))
    assert await cs.commit_task(lease, commit, T0 + 1)
    task = (await cs.get_connector("c")).tasks[0]
    assert (task.positions, task.counts) == ({"orders": 7}, TaskCounts(delivered=6, dead=1))
    assert [(d.offset, d.partition) for d in await cs.list_dead_records("c")] == [(7, None)]
    await cs.command_tasks("c", E.PAUSE, T0 + 2)
    assert not await cs.commit_task(lease, Commit(positions={"orders": 9}), T0 + 3)
    assert (await cs.get_connector("c")).tasks[0].positions == {"orders": 7}


async def test_delete_removes_tasks_and_dead_records_and_fences_holders(
    cs: ConnectorStore,
) -> None:
    await make(cs, tasks=2)
    await make(cs, "keep", tasks=1)
    leases = await take(cs)
    dead = Commit(dead=(NewDeadRecord(record={"n": 1}, error="bad"),))
    assert await cs.commit_task(leases["c", 0], dead, T0 + 1)
    assert await cs.commit_task(leases["keep", 0], dead, T0 + 1)
    await cs.delete_connector("c")
    with pytest.raises(ConnectorNotFoundError):
        await cs.get_connector("c")
    assert [c.name for c in await cs.list_connectors()] == ["keep"]
    assert not await cs.commit_task(leases["c", 0], Commit(positions={"p": 1}), T0 + 2)
    assert sorted(await take(cs, now=T0 + 2)) == [("keep", 0)]
    assert len(await cs.list_dead_records("keep")) == 1
    with pytest.raises(ConnectorNotFoundError):
        await cs.delete_connector("c")
    # The name is free again, and a new connector under it starts afresh.
    recreated = await make(cs, tasks=1, path="/new")
    assert recreated.tasks[0].positions == {}
    assert await cs.list_dead_records("c") == []


async def test_list_dead_records_newest_first_with_limit_and_before(cs: ConnectorStore) -> None:
    await make(cs, tasks=1)
    lease = (await take(cs))["c", 0]
    for n in range(5):
        dead = (NewDeadRecord(record={"n": n}, error=f"bad {n}"),)
        assert await cs.commit_task(lease, Commit(dead=dead), T0 + n)
    records = await cs.list_dead_records("c")
    assert [r.record["n"] for r in records] == [4, 3, 2, 1, 0]
    assert [r.id for r in records] == sorted((r.id for r in records), reverse=True)
    assert [r.error for r in await cs.list_dead_records("c", limit=2)] == ["bad 4", "bad 3"]
    before = await cs.list_dead_records("c", limit=2, before=records[1].id)
    assert [r.record["n"] for r in before] == [2, 1]
    with pytest.raises(ConnectorNotFoundError):
        await cs.list_dead_records("missing")
