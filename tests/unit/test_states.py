"""The run state machine: the whole table, and properties of random walks through it."""

from __future__ import annotations

import itertools
from collections import deque

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from cronbus.errors import InvalidTransitionError
from cronbus.states import (
    TERMINAL,
    TRANSITIONS,
    RunEvent,
    RunState,
    replay,
    sources,
    transition,
)

S = RunState
E = RunEvent

# The table written out a second time on purpose: a change to states.py that loosens the machine
# must also change this test, where a reviewer sees it.
EXPECTED: dict[tuple[RunState, RunEvent], RunState] = {
    (S.SCHEDULED, E.DUE): S.QUEUED,
    (S.QUEUED, E.CLAIM): S.RUNNING,
    (S.RUNNING, E.SUCCEED): S.SUCCEEDED,
    (S.CANCELLING, E.SUCCEED): S.SUCCEEDED,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.CANCELLING, E.FAIL): S.CANCELLED,
    (S.FAILED, E.RETRY): S.SCHEDULED,
    (S.FAILED, E.GIVE_UP): S.DEAD,
    (S.SCHEDULED, E.CANCEL): S.CANCELLED,
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.RUNNING, E.CANCEL): S.CANCELLING,
    (S.CANCELLING, E.CANCEL): S.CANCELLING,
    (S.RUNNING, E.LOSE): S.QUEUED,
    (S.CANCELLING, E.LOSE): S.CANCELLED,
    (S.SCHEDULED, E.SKIP): S.SKIPPED,
    (S.QUEUED, E.SKIP): S.SKIPPED,
    (S.DEAD, E.REQUEUE): S.QUEUED,
    (S.CANCELLED, E.REQUEUE): S.QUEUED,
    (S.WAITING, E.CANCEL): S.CANCELLED,
    (S.RUNNING, E.AWAIT): S.WAITING,
    (S.WAITING, E.CHILDREN_SUCCEEDED): S.SUCCEEDED,
    (S.WAITING, E.CHILDREN_FAILED): S.DEAD,
    (S.DEAD, E.REVIVE): S.WAITING,
    (S.CANCELLED, E.REVIVE): S.WAITING,
}
ILLEGAL = [pair for pair in itertools.product(RunState, RunEvent) if pair not in EXPECTED]

events = st.lists(st.sampled_from(RunEvent), max_size=40)
starts = st.sampled_from([S.SCHEDULED, S.QUEUED])
# For find(): any example will do, so skip shrinking it, which is where find() spends its time.
NO_SHRINK = settings(database=None, max_examples=2000, phases=[Phase.generate])


def legal(state: RunState, event: RunEvent) -> bool:
    """Whether the table allows ``event`` from ``state``."""
    return state in TRANSITIONS[event]


@st.composite
def runs(draw: st.DrawFn) -> tuple[RunState, list[RunEvent]]:
    """A start state and events that are mostly legal, with some illegal ones mixed in.

    Uniformly random events are mostly illegal, so a walk would seldom get past ``running``;
    steering towards legal events makes the walks reach retries, deaths and requeues.
    """
    start = draw(starts)
    state = start
    evs: list[RunEvent] = []
    for _ in range(draw(st.integers(0, 40))):
        allowed = [event for event in RunEvent if legal(state, event)]
        # One step in ten, or when nothing is legal, try any event at all.
        wander = draw(st.integers(0, 9)) == 0
        pool = allowed if allowed and not wander else list(RunEvent)
        event = draw(st.sampled_from(pool))
        evs.append(event)
        state = transition(state, event) if legal(state, event) else state
    return start, evs


def walk(start: RunState, evs: list[RunEvent]) -> list[tuple[RunState, RunEvent, RunState]]:
    """Apply the legal events of ``evs`` in order; check the illegal ones raise and change nothing.

    Returns the steps taken as (before, event, after).
    """
    steps = []
    state = start
    for event in evs:
        if legal(state, event):
            after = transition(state, event)
            steps.append((state, event, after))
            state = after
        else:
            with pytest.raises(InvalidTransitionError):
                transition(state, event)
    return steps


# -- the table ------------------------------------------------------------------------------------


def test_table_is_exactly_the_expected_one() -> None:
    actual = {(src, ev): dst for ev, row in TRANSITIONS.items() for src, dst in row.items()}
    assert actual == EXPECTED


def test_every_event_has_a_row() -> None:
    assert set(TRANSITIONS) == set(RunEvent)


@pytest.mark.parametrize(("pair", "after"), list(EXPECTED.items()), ids=str)
def test_legal_transition(pair: tuple[RunState, RunEvent], after: RunState) -> None:
    state, event = pair
    assert transition(state, event) is after


@pytest.mark.parametrize(("state", "event"), ILLEGAL, ids=str)
def test_illegal_transition_raises(state: RunState, event: RunEvent) -> None:
    with pytest.raises(InvalidTransitionError) as info:
        transition(state, event)
    # The message names both, so a log line says what was attempted.
    assert state.value in str(info.value)
    assert event.value in str(info.value)


def test_illegal_pairs_cover_the_rest_of_the_grid() -> None:
    assert len(ILLEGAL) + len(EXPECTED) == len(RunState) * len(RunEvent)


@pytest.mark.parametrize("event", list(RunEvent))
def test_sources_are_the_keys_of_the_row(event: RunEvent) -> None:
    assert sources(event) == frozenset(TRANSITIONS[event])


@pytest.mark.parametrize("state", list(RunState))
def test_terminal_property_matches_terminal_set(state: RunState) -> None:
    assert state.terminal == (state in TERMINAL)


def test_terminal_states() -> None:
    assert {S.SUCCEEDED, S.CANCELLED, S.DEAD, S.SKIPPED} == TERMINAL


def test_every_state_is_reachable_from_scheduled() -> None:
    seen = {S.SCHEDULED}
    todo = deque(seen)
    while todo:
        state = todo.popleft()
        for row in TRANSITIONS.values():
            if state in row and row[state] not in seen:
                seen.add(row[state])
                todo.append(row[state])
    assert seen == set(RunState)


def test_only_claim_starts_running() -> None:
    into_running = {(src, ev) for (src, ev), dst in EXPECTED.items() if dst is S.RUNNING}
    assert into_running == {(S.QUEUED, E.CLAIM)}


def test_only_retry_returns_to_scheduled() -> None:
    into_scheduled = {(src, ev) for (src, ev), dst in EXPECTED.items() if dst is S.SCHEDULED}
    assert into_scheduled == {(S.FAILED, E.RETRY)}


def test_replay_of_nothing_is_the_start() -> None:
    assert replay(S.QUEUED, []) is S.QUEUED


def test_replay_of_a_retried_run() -> None:
    evs = [E.DUE, E.CLAIM, E.FAIL, E.RETRY, E.DUE, E.CLAIM, E.SUCCEED]
    assert replay(S.SCHEDULED, evs) is S.SUCCEEDED


def test_replay_stops_at_the_first_illegal_event() -> None:
    with pytest.raises(InvalidTransitionError, match="succeeded run cannot claim"):
        replay(S.QUEUED, [E.CLAIM, E.SUCCEED, E.CLAIM])


# -- random walks ---------------------------------------------------------------------------------


@given(runs())
def test_terminal_states_only_leave_by_requeue(run: tuple[RunState, list[RunEvent]]) -> None:
    # REVIVE is a parent's requeue: some of its children were queued again.
    for before, event, _ in walk(*run):
        if before in TERMINAL:
            assert event in (E.REQUEUE, E.REVIVE)


@given(runs())
def test_failed_leads_only_to_scheduled_or_dead(run: tuple[RunState, list[RunEvent]]) -> None:
    for before, _, after in walk(*run):
        if before is S.FAILED:
            assert after in {S.SCHEDULED, S.DEAD}


@given(runs())
def test_succeeded_never_changes_again(run: tuple[RunState, list[RunEvent]]) -> None:
    steps = walk(*run)
    reached = next((i for i, (_, _, after) in enumerate(steps) if after is S.SUCCEEDED), None)
    if reached is not None:
        # walk() has already checked that every later event raised.
        assert len(steps) == reached + 1
        for event in RunEvent:
            assert not legal(S.SUCCEEDED, event)


@given(runs())
def test_cancel_before_running_is_terminal_at_once(run: tuple[RunState, list[RunEvent]]) -> None:
    start, evs = run
    for before, event, after in walk(start, [*evs, E.CANCEL]):
        if event is E.CANCEL and before in {S.SCHEDULED, S.QUEUED}:
            assert after is S.CANCELLED
            assert after.terminal


@given(runs())
def test_every_step_follows_the_table(run: tuple[RunState, list[RunEvent]]) -> None:
    for before, event, after in walk(*run):
        assert EXPECTED[(before, event)] is after


@given(st.sampled_from(RunEvent))
def test_sources_property(event: RunEvent) -> None:
    assert sources(event) == frozenset(TRANSITIONS[event].keys())
    for state in RunState:
        assert (state in sources(event)) == legal(state, event)


def fold(start: RunState, evs: list[RunEvent]) -> RunState | str:
    """Fold ``transition`` over ``evs``: the end state, or the message of the first refusal."""
    state = start
    for event in evs:
        if not legal(state, event):
            with pytest.raises(InvalidTransitionError) as info:
                transition(state, event)
            return str(info.value)
        state = transition(state, event)
    return state


@given(st.sampled_from(RunState), events)
def test_replay_equals_folding_transition_on_random_events(
    start: RunState, evs: list[RunEvent]
) -> None:
    expected = fold(start, evs)
    if isinstance(expected, RunState):
        assert replay(start, evs) is expected
    else:
        with pytest.raises(InvalidTransitionError) as info:
            replay(start, evs)
        assert str(info.value) == expected


@given(runs())
def test_replay_of_a_legal_walk_lands_where_the_walk_did(
    run: tuple[RunState, list[RunEvent]],
) -> None:
    start, evs = run
    steps = walk(start, evs)
    end = steps[-1][2] if steps else start
    assert replay(start, [event for _, event, _ in steps]) is end


@given(runs())
def test_replay_equals_folding_transition_on_walks(run: tuple[RunState, list[RunEvent]]) -> None:
    start, evs = run
    expected = fold(start, evs)
    if isinstance(expected, RunState):
        assert replay(start, evs) is expected
    else:
        with pytest.raises(InvalidTransitionError):
            replay(start, evs)


@pytest.mark.parametrize("goal", sorted(RunState))
def test_walks_reach_every_state(goal: RunState) -> None:
    # Guards the strategy itself: properties over walks that never get anywhere prove nothing.
    def reaches(run: tuple[RunState, list[RunEvent]]) -> bool:
        return any(after is goal for _, _, after in walk(*run))

    find(runs(), reaches, settings=NO_SHRINK)
