"""Retention rules, pure: ages as the edges spell them, keeps per state resolved task → store,
the purge's states, and the pacing of batches."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronbus.config import Settings
from cronbus.errors import ConfigurationError, InvalidArgumentError
from cronbus.observability.retention import Pacer
from cronbus.observability.retention_policy import (
    DAY,
    Keep,
    RetentionRules,
    check_purge_states,
    parse_age,
    rules_for,
)
from cronbus.states import RunState as S


@pytest.mark.parametrize(
    ("spelled", "seconds"),
    [
        (0, 0.0),
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        (" 30m ", 1_800.0),
        ("12h", 43_200.0),
        ("1d", DAY),
        ("2w", 14 * DAY),
        ("1d12h", 1.5 * DAY),
        ("0.5h", 1_800.0),
        (timedelta(hours=2), 7_200.0),
    ],
)
def test_ages_are_read_in_every_spelling(spelled: object, seconds: float) -> None:
    assert parse_age(spelled) == seconds


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (-1, "zero or more"),
        ("-1d", "must be an age"),
        ("1x", "must be an age"),
        ("", "must be an age"),
        ("d", "must be an age"),
        (True, "must be an age"),
        (None, "must be an age"),
        (float("inf"), "zero or more"),
        (float("nan"), "zero or more"),
        ("1000000w", "at most 100 years"),
    ],
)
def test_bad_ages_are_refused_naming_the_field(bad: object, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words) as caught:
        parse_age(bad, "older_than")
    assert caught.value.field == "older_than"
    assert str(caught.value).startswith("older_than ")


def test_a_purge_takes_finished_states_only() -> None:
    assert check_purge_states(None) == (S.CANCELLED, S.DEAD, S.SKIPPED, S.SUCCEEDED)
    assert check_purge_states([]) == (S.CANCELLED, S.DEAD, S.SKIPPED, S.SUCCEEDED)
    assert check_purge_states(["dead", S.DEAD, "succeeded"]) == (S.DEAD, S.SUCCEEDED)
    assert check_purge_states("skipped") == (S.SKIPPED,)
    for live in ("running", "queued", "waiting", "cancelling", "scheduled", "failed"):
        with pytest.raises(InvalidArgumentError, match="not finished"):
            check_purge_states([live])
    with pytest.raises(InvalidArgumentError, match="not a run state"):
        check_purge_states(["done"])


def test_keep_takes_one_age_or_one_per_state() -> None:
    assert Keep.coerce(None) == Keep()
    every = Keep.coerce("2d")
    assert {every.seconds(s) for s in (S.SUCCEEDED, S.DEAD, S.CANCELLED, S.SKIPPED)} == {2 * DAY}
    some = Keep.coerce({"dead": "90d"})
    assert (some.seconds(S.DEAD), some.seconds(S.SUCCEEDED)) == (90 * DAY, None)
    assert some.over(Keep(succeeded=1.0, dead=2.0)) == Keep(succeeded=1.0, dead=90 * DAY)
    with pytest.raises(InvalidArgumentError, match="running is not a finished run state"):
        Keep.coerce({"running": 1})
    with pytest.raises(InvalidArgumentError, match=r"keep\.dead"):
        Keep(dead=-1)


def test_rules_resolve_task_then_store_default() -> None:
    rules = RetentionRules(tasks={"chatty": Keep(succeeded=60.0)})
    assert rules.run_keep(S.SUCCEEDED, "chatty") == 60.0
    assert rules.run_keep(S.DEAD, "chatty") == 30 * DAY
    assert rules.run_keep(S.SUCCEEDED, "other") == 7 * DAY
    assert rules.run_keep(S.SKIPPED, "other") == DAY
    assert rules.shortest_run_keep() == 60.0
    now = 1_000_000.0
    assert rules.purges(S.SUCCEEDED, "chatty", now - 60, now)
    assert not rules.purges(S.SUCCEEDED, "chatty", now - 59, now)
    assert not rules.purges(S.RUNNING, "chatty", 0.0, now)


def test_rules_come_from_settings_and_tasks() -> None:
    class Task:
        def __init__(self, name: str, keep: Keep) -> None:
            self.name, self.keep = name, keep

    settings = Settings(keep_dead_seconds=5.0, keep_events_seconds=6.0, keep_acked_seconds=7.0)
    rules = rules_for(settings, [Task("a", Keep(dead=1.0)), Task("b", Keep())])
    assert rules.runs.dead == 5.0
    assert dict(rules.tasks) == {"a": Keep(dead=1.0)}
    assert (rules.events, rules.acked) == (6.0, 7.0)


def test_settings_refuse_negative_keeps_from_the_environment() -> None:
    with pytest.raises(ConfigurationError, match="CRONBUS_KEEP_DEAD_SECONDS"):
        Settings.load({"CRONBUS_KEEP_DEAD_SECONDS": "-1"})
    with pytest.raises(ConfigurationError, match="CRONBUS_RETENTION_BATCH"):
        Settings.load({"CRONBUS_RETENTION_BATCH": "0"})
    assert Settings.load({"CRONBUS_KEEP_SKIPPED_SECONDS": "0"}).keep_skipped_seconds == 0


def test_the_pacer_halves_slow_batches_and_grows_quick_ones_back() -> None:
    pacer = Pacer(500, budget=0.025)
    pacer.record(0.030)
    assert pacer.size == 250
    for _ in range(10):
        pacer.record(1.0)
    assert pacer.size == 16
    pacer.record(0.020)  # within budget, not quick: stays
    assert pacer.size == 16
    for _ in range(10):
        pacer.record(0.001)
    assert pacer.size == 500
