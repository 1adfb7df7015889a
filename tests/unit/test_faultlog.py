"""The dispatcher's failure warnings: one per failed attempt or dead letter, rate-limited."""

from __future__ import annotations

import logging

import pytest

from cronbus.events.faultlog import DEAD, FAILED, SUPPRESSED, FaultLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fail(faults: FaultLog, sub: str = "s") -> None:
    faults.failed(sub, "h.example:443", attempt=1, status=500, error="HTTP 500", then="retry")


def test_each_failure_is_a_warning_until_the_limit_then_one_suppressed_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    faults = FaultLog(logging.getLogger("test.faults"), limit=3, window=60.0, clock=clock)
    with caplog.at_level(logging.WARNING, "test.faults"):
        for _ in range(10):
            fail(faults)
        fail(faults, "other")  # its own budget
        assert [r.action for r in caplog.records] == [FAILED] * 4  # type: ignore[attr-defined]
        clock.now += 30
        faults.flush()
        assert len(caplog.records) == 4  # the window is still open
        clock.now += 31
        faults.flush()
    suppressed = [r for r in caplog.records if r.action == SUPPRESSED]  # type: ignore[attr-defined]
    assert len(suppressed) == 1
    assert suppressed[0].suppressed == 7  # type: ignore[attr-defined]
    assert "suppressed 7 similar messages" in suppressed[0].getMessage()
    first = caplog.records[0]
    assert (first.subscription, first.target, first.status) == ("s", "h.example:443", 500)  # type: ignore[attr-defined]
    assert first.levelno == logging.WARNING


def test_a_new_window_writes_again_and_reports_the_old_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    faults = FaultLog(logging.getLogger("test.faults"), limit=1, window=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, "test.faults"):
        fail(faults)
        fail(faults)
        faults.dead(
            "s", "h:1", delivery=7, event_id="e", attempts=3, status=None, error="boom"
        )  # dead letters have a budget of their own
        clock.now += 11
        fail(faults)
        faults.forget("s")
    actions = [r.action for r in caplog.records]  # type: ignore[attr-defined]
    assert actions == [FAILED, DEAD, SUPPRESSED, FAILED]
    assert "delivery 7 (event e) to h:1 is a dead letter after 3 attempt(s): boom" in (
        caplog.records[1].getMessage()
    )
