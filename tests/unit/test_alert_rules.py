"""The pure core of alerts: what each rule finds in the figures, and the life of an alert
(fire once, repeat after the interval, resolve with a message, silence), plus the builders'
refusals."""

from __future__ import annotations

import pytest

from cronbus.errors import InvalidArgumentError
from cronbus.model import QueueDepth, WorkerInfo, WorkerState
from cronbus.observability.alerts import (
    AlertRule,
    HistoryKind,
    NoticeKind,
    Silence,
    build_rule,
    chat,
    email,
    parse_duration,
    webhook,
)
from cronbus.observability.alerts.lifecycle import step
from cronbus.observability.alerts.records import silenced
from cronbus.observability.alerts.rules import (
    DeadRuns,
    Figures,
    Finding,
    JobRuns,
    SubscriptionHealth,
    custom_findings,
    findings,
)
from cronbus.states import RunState

NOW = 1_700_000_000.0
HOOK = webhook("http://127.0.0.1:9/hook")


def rule(kind: str, **params: object) -> AlertRule:
    return build_rule(kind, to=[HOOK], repeat=60, **params)  # type: ignore[arg-type]


def worker(wid: str, state: WorkerState, queues: tuple[str, ...] = ("*",)) -> WorkerInfo:
    return WorkerInfo(
        id=wid,
        host="h",
        pid=1,
        queues=queues,
        concurrency=1,
        version="x",
        started_at=NOW - 100,
        heartbeat_at=NOW - 90,
        state=state,
    )


def depth(queue: str, count: int, oldest: float, state: RunState = RunState.QUEUED) -> QueueDepth:
    return QueueDepth(queue=queue, state=state, count=count, oldest=oldest)


def subjects(found: list[Finding]) -> list[str]:
    return [f.subject for f in found]


# -- findings ------------------------------------------------------------------------------
def test_job_failures_needs_the_newest_finished_runs_all_dead() -> None:
    dead, ok, live = RunState.DEAD, RunState.SUCCEEDED, RunState.RUNNING
    figures = Figures(
        namespace="default",
        now=NOW,
        jobs=(
            JobRuns(name="a", states=(live, dead, RunState.CANCELLED, dead, dead, ok)),
            JobRuns(name="b", states=(dead, ok, dead, dead)),
            JobRuns(name="c", states=(dead, dead)),
        ),
    )
    assert subjects(findings(rule("job-failures"), figures)) == ["a"]
    assert subjects(findings(rule("job-failures", count=2), figures)) == ["a", "c"]
    assert subjects(findings(rule("job-failures", count=1, job="b"), figures)) == ["b"]


def test_dead_runs_one_alert_per_task_above_the_threshold() -> None:
    figures = Figures(
        namespace="default",
        now=NOW,
        dead=(
            DeadRuns(task="a", queues=("q",), count=1, newest=7, error="ValueError: x"),
            DeadRuns(task="b", queues=("r",), count=3, newest=9),
        ),
    )
    found = findings(rule("dead-runs"), figures)
    assert subjects(found) == ["a", "b"]
    assert "run 7: ValueError: x" in found[0].message
    assert subjects(findings(rule("dead-runs", threshold=1), figures)) == ["b"]
    assert subjects(findings(rule("dead-runs", queue="q"), figures)) == ["a"]
    assert subjects(findings(rule("dead-runs", task="b"), figures)) == ["b"]


def test_queue_depth_and_age_watch_queued_runs_only() -> None:
    figures = Figures(
        namespace="default",
        now=NOW,
        queues=(
            depth("a", 150, NOW - 10),
            depth("a", 900, NOW - 900, RunState.SCHEDULED),
            depth("b", 5, NOW - 700),
        ),
    )
    assert subjects(findings(rule("queue-depth", threshold=100), figures)) == ["a"]
    assert subjects(findings(rule("queue-depth", threshold=100, queue="b"), figures)) == []
    assert subjects(findings(rule("queue-age", threshold="5m"), figures)) == ["b"]
    (found,) = findings(rule("queue-age", threshold=60), figures)
    message = found.message
    assert "waited 12 min" in message


def test_scheduler_lag_from_fire_lags_or_an_overdue_fire() -> None:
    late = Figures(namespace="default", now=NOW, fire_lags=(0.1,) * 98 + (9.0, 9.0))
    assert findings(rule("scheduler-lag", threshold=5), late)[0].subject == "*"
    assert findings(rule("scheduler-lag", threshold=10), late) == []
    overdue = Figures(
        namespace="default",
        now=NOW,
        jobs=(JobRuns(name="report", states=(), next_fire_at=NOW - 120),),
    )
    (found,) = findings(rule("scheduler-lag", threshold=30), overdue)
    assert "report's fire is 2 min overdue" in found.message


def test_subscriptions_failing_and_circuits() -> None:
    figures = Figures(
        namespace="default",
        now=NOW,
        subscriptions=(
            SubscriptionHealth(name="a", failing=True, reasons=("2 deliveries dead",)),
            SubscriptionHealth(
                name="b", failing=True, reasons=("x",), circuit_open=True, circuit_failures=5
            ),
            SubscriptionHealth(name="c", failing=False),
        ),
    )
    assert subjects(findings(rule("subscription-failing"), figures)) == ["a", "b"]
    assert subjects(findings(rule("subscription-failing", subscription="a"), figures)) == ["a"]
    (found,) = findings(rule("circuit-open"), figures)
    assert found.subject == "b"
    assert "last 5 pushes failed" in found.message


def test_workers_lost_and_queues_no_live_worker_serves() -> None:
    figures = Figures(
        namespace="default",
        now=NOW,
        workers=(
            worker("w1", WorkerState.LOST),
            worker("w2", WorkerState.ALIVE, ("a",)),
            worker("w3", WorkerState.DRAINING, ("b",)),
        ),
        queues=(depth("a", 1, NOW), depth("b", 2, NOW), depth("c", 3, NOW, RunState.SCHEDULED)),
    )
    assert subjects(findings(rule("worker-lost"), figures)) == ["w1"]
    assert subjects(findings(rule("queue-unserved"), figures)) == ["b", "c"]
    assert subjects(findings(rule("queue-unserved", queue="idle"), figures)) == ["idle"]
    assert subjects(findings(rule("queue-unserved", queue="a"), figures)) == []


def test_custom_findings_accept_none_a_message_or_a_mapping() -> None:
    assert custom_findings(None) == []
    assert custom_findings("") == []
    assert custom_findings("too many orders") == [Finding(subject="*", message="too many orders")]
    assert subjects(custom_findings({"eu": "slow", "us": None})) == ["eu"]


# -- the life of an alert ------------------------------------------------------------------
def test_an_alert_fires_once_repeats_after_the_interval_and_resolves() -> None:
    r = rule("queue-depth", threshold=1)
    held = Finding(subject="q", message="queue q: 5 runs queued")
    first = step(r, "q", None, held, NOW, silent=False)
    assert first.state is not None
    assert first.state.notice is NoticeKind.FIRED
    assert first.state.pending == (HOOK.key,)
    assert first.entry is not None
    assert first.entry.kind is HistoryKind.FIRED
    # Still holding before the interval: nothing new (the same state, no entry).
    quiet = step(r, "q", first.state, held, NOW + 59, silent=False)
    assert quiet.state == first.state
    assert quiet.entry is None
    again = step(r, "q", first.state, held, NOW + 60, silent=False)
    assert again.state is not None
    assert again.state.notice is NoticeKind.REPEATED
    assert again.state.since == NOW
    done = step(r, "q", again.state, None, NOW + 70, silent=False)
    assert done.state is not None
    assert not done.state.firing
    assert done.state.notice is NoticeKind.RESOLVED
    assert done.state.notice_message == "resolved: queue q: back to 1 queued runs or fewer"


def test_repeat_zero_tells_once() -> None:
    r = build_rule("worker-lost", to=[HOOK], repeat=0)
    fired = step(r, "w", None, Finding(subject="w", message="lost"), NOW, silent=False).state
    later = step(r, "w", fired, Finding(subject="w", message="lost"), NOW + 10**6, silent=False)
    assert later.state == fired


def test_a_silenced_alert_tells_nobody_then_is_announced_when_the_silence_ends() -> None:
    r = rule("worker-lost")
    held = Finding(subject="w", message="lost")
    fired = step(r, "w", None, held, NOW, silent=True)
    assert fired.state is not None
    assert fired.state.firing
    assert fired.state.pending == ()
    assert fired.state.notified_at is None
    assert fired.entry is not None
    assert fired.entry.detail == "silenced"
    still = step(r, "w", fired.state, held, NOW + 500, silent=True)
    assert still.state == fired.state
    after = step(r, "w", fired.state, held, NOW + 600, silent=False)
    assert after.state is not None
    assert after.state.notice is NoticeKind.FIRED
    assert after.state.pending == (HOOK.key,)


def test_an_alert_that_nobody_was_told_of_resolves_in_the_history_only() -> None:
    r = rule("worker-lost")
    fired = step(r, "w", None, Finding(subject="w", message="lost"), NOW, silent=True).state
    ended = step(r, "w", fired, None, NOW + 1, silent=False)
    assert ended.state is None
    assert ended.entry is not None
    assert ended.entry.kind is HistoryKind.RESOLVED


def test_silences_of_a_rule_or_of_every_rule_of_its_namespace() -> None:
    r = rule("worker-lost", worker="w")
    one = {
        ("default", r.name): Silence(
            namespace="default", rule=r.name, until=NOW + 5, created_at=NOW
        )
    }
    every = {
        ("default", "*"): Silence(namespace="default", rule="*", until=NOW + 5, created_at=NOW)
    }
    other = {("shop", "*"): Silence(namespace="shop", rule="*", until=NOW + 5, created_at=NOW)}
    assert silenced(r, one, NOW)
    assert silenced(r, every, NOW + 4.9)
    assert not silenced(r, every, NOW + 5)
    assert not silenced(r, other, NOW)


# -- building ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("queue-size", {}, "unknown alert rule kind 'queue-size'"),
        ("queue-depth", {}, "needs a threshold"),
        ("queue-depth", {"threshold": -1}, "threshold must be a whole number from 0"),
        ("queue-age", {"threshold": "soon"}, "threshold must be a number of seconds"),
        ("worker-lost", {"queue": "a"}, "queue does not apply to a worker-lost rule"),
        ("job-failures", {"count": 0}, "count must be a whole number from 1"),
        ("queue-unserved", {"queue": "no spaces"}, "queue must be 1 to 100"),
    ],
)
def test_bad_rules_are_refused_saying_why(
    kind: str, params: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        build_rule(kind, to=[HOOK], **params)  # type: ignore[arg-type]


def test_a_rule_needs_a_destination_and_good_ones() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one destination"):
        build_rule("worker-lost")
    with pytest.raises(InvalidArgumentError, match="not an email address"):
        email("nobody")
    with pytest.raises(InvalidArgumentError, match="http"):
        chat("ftp://example.com/x")
    with pytest.raises(InvalidArgumentError, match="whsec_"):
        webhook("http://127.0.0.1/x", secret="plain")


def test_default_names_and_durations() -> None:
    assert rule("queue-depth", threshold=3, queue="emails").name == "queue-depth-emails"
    assert rule("scheduler-lag", threshold="1m").threshold == 60
    assert parse_duration("1h30m", "x") == 5400
    assert parse_duration("1d", "x") == 86_400
    assert parse_duration(12, "x") == 12
    with pytest.raises(InvalidArgumentError, match="like 30s"):
        parse_duration("1 hour", "x")


def test_listings_mask_secrets() -> None:
    r = build_rule(
        "worker-lost",
        to=[
            webhook("http://u:p@127.0.0.1/x?token=abc", secret="whsec_" + "A" * 40),
            chat("https://hooks.example.com/services/T0/B0/SECRET"),
            email("ops@example.com", password="hunter2"),
        ],
    )
    shown = str(r.public())
    for secret in ("abc", "SECRET", "hunter2", "whsec_", "u:p"):
        assert secret not in shown


# -- settings ------------------------------------------------------------------------------
def test_settings_come_from_the_environment_and_bad_ones_are_named() -> None:
    from cronbus.errors import ConfigurationError
    from cronbus.observability.alerts.settings import AlertSettings

    env = {
        "CRONBUS_ALERT_SECONDS": "2.5",
        "CRONBUS_SMTP_HOST": "mail.internal",
        "CRONBUS_SMTP_PORT": "2525",
        "CRONBUS_SMTP_STARTTLS": "yes",
        "CRONBUS_SMTP_PASSWORD": "hunter2",
        "CRONBUS_SMTP_FROM": "",
    }
    settings = AlertSettings.load(env)
    assert settings.alert_seconds == 2.5
    assert (settings.smtp_host, settings.smtp_port, settings.smtp_starttls) == (
        "mail.internal",
        2525,
        True,
    )
    assert settings.smtp_from == "cronbus@localhost"  # empty: the default
    assert "hunter2" not in repr(settings)
    for variable, value in (
        ("CRONBUS_ALERT_SECONDS", "0"),
        ("CRONBUS_SMTP_PORT", "smtp"),
        ("CRONBUS_SMTP_STARTTLS", "maybe"),
    ):
        with pytest.raises(ConfigurationError, match=variable):
            AlertSettings.load({variable: value})
