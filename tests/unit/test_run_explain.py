"""Why a run waits, said by :func:`cronbus.services.waiting.explain` from the run, the worker
registry and the count of its concurrency key: each reason alone, its precedence, and nothing
said for a run that waits for nothing in particular."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from cronbus.liveness import is_live
from cronbus.model import Children, FanOutKind, Lane, Run, WorkerInfo, WorkerState
from cronbus.services.waiting import Limits, children_line, explain
from cronbus.states import RunState

NOW = 1_000_000.0


def run(**fields: Any) -> Run:
    """A queued run of task ``send`` in queue ``default``, due now, with ``fields`` changed."""
    base = Run(
        id=7,
        task="send",
        queue="default",
        state=RunState.QUEUED,
        priority=0,
        lane=Lane.FRESH,
        eta=NOW - 1,
        attempts=0,
        max_attempts=1,
        timeout=None,
        idempotency_key=None,
        args=[],
        kwargs={},
        result=None,
        error=None,
        created_at=NOW - 10,
        updated_at=NOW - 10,
        finished_at=None,
        lease_owner=None,
        lease_expires=None,
        attempt_id=None,
    )
    return replace(base, **fields)


def worker(worker_id: str = "w1", **fields: Any) -> WorkerInfo:
    """A live worker of ``default`` serving every queue and knowing ``send``."""
    base = WorkerInfo(
        id=worker_id,
        host="h",
        pid=1,
        queues=["*"],
        concurrency=4,
        version="1",
        started_at=NOW - 100,
        heartbeat_at=NOW - 1,
        tasks=["send"],
        lease_seconds=30.0,
    )
    return replace(base, **fields)


def test_a_run_a_live_worker_may_take_waits_for_nothing_in_particular() -> None:
    assert explain(run(), [worker()], NOW) == []
    assert explain(run(state=RunState.SCHEDULED, eta=NOW + 60), [worker()], NOW) == []


@pytest.mark.parametrize("state", [RunState.RUNNING, RunState.SUCCEEDED, RunState.DEAD])
def test_a_run_that_is_not_waiting_has_no_reason(state: RunState) -> None:
    assert explain(run(state=state), [], NOW) == []


def test_no_live_worker_serves_the_queue() -> None:
    lines = explain(run(queue="mail"), [worker(queues=["default"])], NOW)
    assert len(lines) == 1
    assert lines[0].startswith("no live worker serves queue 'mail'")
    assert "namespace" not in lines[0]
    other = explain(run(namespace="shop"), [worker()], NOW)
    assert "in namespace 'shop'" in other[0]


@pytest.mark.parametrize(
    "gone",
    [
        {"state": WorkerState.DRAINING},
        {"state": WorkerState.STOPPED},
        {"state": WorkerState.LOST},
        {"heartbeat_at": NOW - 31},  # silent for longer than its own lease
    ],
)
def test_only_alive_workers_within_their_lease_count(gone: dict[str, Any]) -> None:
    assert not is_live(worker(**gone), NOW)
    (line,) = explain(run(), [worker(**gone)], NOW)
    assert line.startswith("no live worker serves queue 'default'")


def test_a_worker_lives_by_its_own_lease() -> None:
    long = worker(heartbeat_at=NOW - 50, lease_seconds=60.0)
    assert is_live(long, NOW)
    assert explain(run(), [long], NOW) == []


def test_no_live_worker_knows_the_task() -> None:
    (line,) = explain(run(task="add"), [worker(tasks=["send"])], NOW)
    assert "knows task 'add'" in line
    # A worker of an older version registers no task list: it may know it.
    assert explain(run(task="add"), [worker(tasks=[])], NOW) == []


def test_needed_labels_no_live_worker_carries() -> None:
    needy = run(route_labels=("gpu", "eu"))
    workers = [worker("w1", labels=["gpu"]), worker("w2", labels=["eu"])]
    (line,) = explain(needy, workers, NOW)
    assert line.startswith("needs labels eu, gpu: no live worker")
    # The labels must be on a worker that knows the task.
    stranger = worker("w3", labels=["gpu", "eu", "x"], tasks=["other"])
    assert explain(needy, [*workers, stranger], NOW) == [line]
    both = worker("w4", labels=["gpu", "eu", "x"])
    assert explain(needy, [*workers, both], NOW) == []


def test_pinned_to_a_live_worker() -> None:
    (line,) = explain(run(target_worker="w2", route="hash"), [worker(), worker("w2")], NOW)
    assert line == "pinned to worker w2 (route hash): only it claims the run"


def test_a_target_that_is_gone_is_rerouted() -> None:
    routed = run(target_worker="w2", route="round_robin")
    (line,) = explain(routed, [worker(), worker("w2", state=WorkerState.STOPPED)], NOW)
    assert line.startswith(
        "waiting for worker w2, which is not alive (stopped): it will be rerouted"
    )
    (silent,) = explain(routed, [worker(), worker("w2", heartbeat_at=NOW - 100)], NOW)
    assert "silent for longer than its lease" in silent
    (unknown,) = explain(routed, [worker()], NOW)
    assert "which is not registered" in unknown


def test_a_broadcast_child_whose_worker_left_ends_dead() -> None:
    child = run(target_worker="w2", route="pinned", parent_id=3, child_index=1)
    (line,) = explain(child, [worker()], NOW)
    assert "broadcast child runs only on its worker" in line
    assert "WorkerGone" in line


def test_at_its_concurrency_limit() -> None:
    limited = run(limit_key="default:send")
    full = Limits(running=3, limit_max=3)
    assert explain(limited, [worker()], NOW, full) == [
        "at its concurrency limit (key default:send: 3 running of 3)"
    ]
    assert explain(limited, [worker()], NOW, replace(full, running=2)) == []
    # Not due yet: the limit is no reason (it applies when the run becomes due).
    later = replace(limited, state=RunState.SCHEDULED, eta=NOW + 60)
    assert explain(later, [worker()], NOW, full) == []


def test_a_limit_of_unknown_size_says_what_it_knows() -> None:
    limited = run(limit_key="default:send:acme")
    assert explain(limited, [worker()], NOW, Limits(running=0)) == []
    assert explain(limited, [worker()], NOW, Limits(running=2)) == [
        "concurrency limited (key default:send:acme: 2 running now)"
    ]


def test_rate_limited() -> None:
    rated = run(rate_key="default:send")
    assert explain(rated, [worker()], NOW) == ["rate limited (key default:send)"]
    sized = Limits(rate_max=100, rate_period=60.0)
    assert explain(rated, [worker()], NOW, sized) == [
        "rate limited (key default:send: at most 100 starts per 60 s)"
    ]


def test_a_run_no_worker_can_take_says_only_that() -> None:
    # The limits do not matter while no worker may take the run at all.
    both = run(queue="mail", limit_key="k", rate_key="r", target_worker="w9", route="hash")
    lines = explain(both, [worker(queues=["default"])], NOW, Limits(running=5, limit_max=1))
    assert len(lines) == 1
    assert lines[0].startswith("no live worker serves queue 'mail'")


def test_a_parent_waits_for_its_children() -> None:
    counts = Children(kind=FanOutKind.SHARDS, total=10, ended=3, succeeded=2)
    parent = run(state=RunState.WAITING, children=counts)
    assert explain(parent, [], NOW) == ["waiting for children: 3 of 10 ended, 2 succeeded"]
    reducing = replace(counts, ended=10, succeeded=10, reduce_run_id=99)
    assert children_line(reducing) == "waiting for its reduce run 99: 10 of 10 children succeeded"
    assert children_line(None) == "waiting for its children"
