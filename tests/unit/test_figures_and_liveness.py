"""The pure rules behind issue 30 items 11 and 12: when a worker is lost
(:mod:`cronbus.liveness`) and how a run's figures read (:mod:`cronbus.run_figures`)."""

from __future__ import annotations

import pytest

from cronbus import run_figures
from cronbus.liveness import is_live, is_lost, live_sql, reported_state
from cronbus.model import Children, FanOutKind, WorkerState
from cronbus.states import RunState
from unit.test_run_explain import NOW, run, worker


def test_a_worker_is_lost_past_its_own_lease_and_not_before() -> None:
    alive = WorkerState.ALIVE
    assert not is_lost(alive, NOW - 10, 10.0, NOW)  # exactly its lease: still live
    assert is_lost(alive, NOW - 10.001, 10.0, NOW)
    assert is_lost(WorkerState.DRAINING, NOW - 11, 10.0, NOW)  # a silent drain is lost too
    assert not is_lost(WorkerState.STOPPED, NOW - 1e6, 10.0, NOW)  # it said goodbye
    assert reported_state(alive, NOW - 11, 10.0, NOW) is WorkerState.LOST
    assert reported_state(WorkerState.DRAINING, NOW, 10.0, NOW) is WorkerState.DRAINING


def test_live_means_alive_and_not_lost() -> None:
    assert is_live(worker(heartbeat_at=NOW - 9, lease_seconds=10.0), NOW)
    assert not is_live(worker(heartbeat_at=NOW - 11, lease_seconds=10.0), NOW)
    assert not is_live(worker(state=WorkerState.DRAINING), NOW)
    assert live_sql(":now") == "state = 'alive' AND heartbeat_at + lease_seconds >= :now"
    assert live_sql("%(now)s", "w").startswith("w.state = 'alive' AND w.heartbeat_at")


def test_a_parent_shows_its_reduce_result_a_broadcast_none() -> None:
    mapped = Children(kind=FanOutKind.MAP, total=2, ended=2, succeeded=2, reduce_run_id=9)
    plain = Children(kind=FanOutKind.MAP, total=2, ended=2, succeeded=2)
    shards = Children(kind=FanOutKind.SHARDS, total=2, ended=2, succeeded=2)
    assert run_figures.shown_result("own", None, None) == "own"
    assert run_figures.shown_result("mapped 2", mapped, 3) == 3
    assert run_figures.shown_result("mapped 2", plain, None) == "mapped 2"
    assert run_figures.shown_result("x", shards, None) is None


@pytest.mark.parametrize(
    ("fields", "text", "cell"),
    [
        ({"attempts": 1, "tries": 1, "max_attempts": 3}, "1 of 3", "1/3"),
        ({"attempts": 0, "tries": 0, "max_attempts": 3}, "0 of 3", "0/3"),
        (
            {"attempts": 2, "tries": 1, "lost": 1, "max_attempts": 1},
            "2 attempts: try 1 of 1, 1 lost",
            "2 (1/1)",
        ),
        (
            {"attempts": 2, "tries": 1, "max_attempts": 1},
            "2 attempts: try 1 of 1, 1 before a retry by hand",
            "2 (1/1)",
        ),
        (
            {"attempts": 1, "tries": 0, "max_attempts": 1, "state": RunState.QUEUED},
            "1 attempt: try 0 of 1, 1 before a retry by hand",
            "1 (0/1)",
        ),
    ],
)
def test_attempts_read_against_the_current_budget(
    fields: dict[str, object], text: str, cell: str
) -> None:
    shown = run(**fields)
    assert run_figures.attempts_text(shown) == text
    assert run_figures.attempts_cell(shown) == cell


def test_tries_count_the_attempt_in_flight() -> None:
    assert run_figures.tries(0, RunState.RUNNING) == 1
    assert run_figures.tries(1, RunState.SCHEDULED) == 1
    assert run_figures.tries(2, RunState.CANCELLING) == 3


def test_a_run_lasts_from_its_first_start_to_its_end() -> None:
    assert run_figures.duration(run()) is None
    assert run_figures.duration(run(started_at=NOW, finished_at=None)) is None
    assert run_figures.duration(run(created_at=NOW - 600, started_at=NOW, finished_at=NOW + 2)) == 2
