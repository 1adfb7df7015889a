"""Unit tests of the metrics module: labels, caps, outcomes, the switch, figures as JSON."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cronbus.errors import ConfigurationError
from cronbus.events.pusher import delivery_outcome
from cronbus.events.records import DeliveryOutcome, DeliveryResult
from cronbus.model import ClaimedRun, Fire, NewRun, Outcome
from cronbus.observability import metrics as metrics_module
from cronbus.observability.figures import Figures
from cronbus.observability.metrics import OTHER, Metrics, metrics_enabled, outcome_label
from cronbus.scheduler import fire_result
from cronbus.states import AttemptOutcome


def samples(m: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(m.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def claimed(task: str = "t", queue: str = "q") -> ClaimedRun:
    return ClaimedRun(
        run_id=1, attempt_id=1, attempt=1, number=1, fence=1, task=task, queue=queue,
        args_json="[]", kwargs_json="{}", max_attempts=3, timeout=None, eta=0.0,
    )  # fmt: skip


def outcome(kind: AttemptOutcome, retry_at: float | None = None) -> Outcome:
    return Outcome(run_id=1, attempt_id=1, outcome=kind, retry_at=retry_at)


@pytest.mark.parametrize(
    ("kind", "retry_at", "label"),
    [
        (AttemptOutcome.SUCCEEDED, None, "succeeded"),
        (AttemptOutcome.FAILED, 5.0, "failed"),
        (AttemptOutcome.FAILED, None, "dead"),
        (AttemptOutcome.TIMED_OUT, 5.0, "timed_out"),
        (AttemptOutcome.TIMED_OUT, None, "dead"),
        (AttemptOutcome.CANCELLED, None, "cancelled"),
        (AttemptOutcome.LOST, None, "lost"),
    ],
)
def test_outcome_label(kind: AttemptOutcome, retry_at: float | None, label: str) -> None:
    assert outcome_label(outcome(kind, retry_at)) == label


def test_runs_recorded_counts_only_what_the_store_recorded() -> None:
    m = Metrics()
    ended = [
        (claimed(), outcome(AttemptOutcome.SUCCEEDED)),
        (claimed(), outcome(AttemptOutcome.FAILED)),
        (claimed(), outcome(AttemptOutcome.SUCCEEDED)),
    ]
    m.runs_recorded(ended, [True, True, False])  # the third was fenced off
    got = samples(m)
    key = frozenset({"task": "t", "queue": "q", "outcome": "succeeded"}.items())
    assert got[("cronbus_runs_total", key)] == 1
    dead = frozenset({"task": "t", "queue": "q", "outcome": "dead"}.items())
    assert got[("cronbus_runs_total", dead)] == 1


def test_label_sets_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "MAX_SERIES", 3)
    m = Metrics()
    for n in range(10):
        m.published(f"topic-{n}", 1)
    got = samples(m)
    topics = {dict(k)["topic"] for name, k in got if name == "cronbus_events_published_total"}
    assert topics == {"topic-0", "topic-1", "topic-2", OTHER}
    other = frozenset({"topic": OTHER}.items())
    assert got[("cronbus_events_published_total", other)] == 7


def test_negative_waits_count_as_zero() -> None:
    m = Metrics()
    m.run_started("q", -0.4)  # started a hair before its eta by another clock
    m.fired("job", "run", [-0.5, 0.25])  # created ahead by the look-ahead, then late
    got = samples(m)
    assert got[("cronbus_run_start_delay_seconds_sum", frozenset({("queue", "q")}))] == 0
    assert got[("cronbus_scheduler_lag_seconds_sum", frozenset())] == 0.25
    assert got[("cronbus_scheduler_lag_seconds_count", frozenset())] == 2


def test_each_app_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.published("t", 2)
    assert ("cronbus_events_published_total", frozenset({("topic", "t")})) not in samples(second)


@pytest.mark.parametrize(
    ("given", "env", "enabled"),
    [
        (None, {}, True),
        (None, {"CRONBUS_METRICS": "0"}, False),
        (None, {"CRONBUS_METRICS": "off"}, False),
        (None, {"CRONBUS_METRICS": "TRUE"}, True),
        (True, {"CRONBUS_METRICS": "0"}, True),
        (False, {}, False),
    ],
)
def test_metrics_enabled(given: bool | None, env: dict[str, str], enabled: bool) -> None:
    assert metrics_enabled(given, env) is enabled


def test_metrics_enabled_refuses_nonsense() -> None:
    with pytest.raises(ConfigurationError, match="CRONBUS_METRICS: expected 1 or 0"):
        metrics_enabled(None, {"CRONBUS_METRICS": "perhaps"})


def test_fire_result() -> None:
    run = NewRun(task="t", queue="q", eta=1.0)
    assert fire_result(Fire(job_id=1, expected=1.0, next_fire_at=2.0, runs=[run])) == "run"
    late = Fire(job_id=1, expected=1.0, next_fire_at=9.0, runs=[run], missed=1)
    assert fire_result(late) == "misfired"
    skipped = Fire(job_id=1, expected=1.0, next_fire_at=9.0, runs=[], missed=1)
    assert fire_result(skipped) == "skipped"


def test_delivery_outcome() -> None:
    base = DeliveryResult(
        delivery_id=1, outcome=DeliveryOutcome.ACKED, started_at=0.0, finished_at=1.0
    )
    assert delivery_outcome(base) == "acked"
    failed = DeliveryResult(
        delivery_id=1, outcome=DeliveryOutcome.FAILED, started_at=0, finished_at=1, retry_at=5
    )
    assert delivery_outcome(failed) == "failed"
    dead = DeliveryResult(
        delivery_id=1, outcome=DeliveryOutcome.TIMED_OUT, started_at=0, finished_at=1
    )
    assert delivery_outcome(dead) == "dead"


def test_figures_round_trip_through_json() -> None:
    figures = Figures(
        namespace="default",
        taken_at=12.5,
        depths=(("a", "queued", 3), ("a", "running", 1)),
        oldest={"a": 10.0},
        workers={"alive": 2, "draining": 0, "lost": 1},
        lags={"hook": 4},
    )
    assert Figures.from_json(figures.to_json()) == figures


def test_the_dashboard_shows_every_metric() -> None:
    """docs/grafana-dashboard.json is valid JSON and queries each named metric."""
    import json
    from pathlib import Path

    path = Path(__file__).parents[2] / "docs" / "grafana-dashboard.json"
    dashboard = json.loads(path.read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    names = [
        "cronbus_runs_total", "cronbus_run_duration_seconds", "cronbus_run_start_delay_seconds",
        "cronbus_queue_depth", "cronbus_queue_oldest_age_seconds", "cronbus_worker_slots",
        "cronbus_job_fires_total", "cronbus_scheduler_lag_seconds",
        "cronbus_events_published_total", "cronbus_deliveries_total",
        "cronbus_delivery_duration_seconds", "cronbus_subscription_lag_events",
        "cronbus_circuit_open", "cronbus_workers", "cronbus_store_transaction_seconds",
    ]  # fmt: skip
    assert [name for name in names if name not in exprs] == []
