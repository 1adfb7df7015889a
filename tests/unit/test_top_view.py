"""``cronbus top``'s frames: queue rows, net rates and the drawn screen, without a terminal."""

from __future__ import annotations

from rich.console import Console

from cronbus.cli.top_view import Frame, queue_rows, queued_by_queue, render
from cronbus.model import QueueDepth
from cronbus.services.overview import Overview
from cronbus.states import RunState

T0 = 1_700_000_000.0


def overview(at: float, *depths: QueueDepth) -> Overview:
    return Overview(namespace="default", taken_at=at, queues=depths)


def depth(queue: str, state: RunState, count: int, oldest: float | None = None) -> QueueDepth:
    return QueueDepth(queue=queue, state=state, count=count, oldest=oldest)


def test_rows_are_busiest_first_with_the_oldest_queued_age() -> None:
    frame = Frame(
        overview=overview(
            T0,
            depth("a", RunState.QUEUED, 2, T0 - 5),
            depth("b", RunState.QUEUED, 9, T0 - 1),
            depth("b", RunState.RUNNING, 3),
            depth("c", RunState.SCHEDULED, 4, T0 + 60),
        )
    )
    rows = queue_rows(frame)
    assert [r.queue for r in rows] == ["b", "a", "c"]
    assert (rows[0].queued, rows[0].running, rows[0].oldest_age) == (9, 3, 1.0)
    assert rows[1].oldest_age == 5.0
    assert (rows[2].scheduled, rows[2].oldest_age) == (4, None)  # nothing queued: no age
    assert all(r.rate is None for r in rows)  # the first frame has nothing to compare with


def test_the_rate_is_the_net_drain_since_the_previous_frame() -> None:
    before = overview(T0, depth("a", RunState.QUEUED, 100), depth("b", RunState.QUEUED, 5))
    now = overview(T0 + 2, depth("a", RunState.QUEUED, 40), depth("c", RunState.QUEUED, 4))
    frame = Frame(overview=now, previous=queued_by_queue(before), previous_at=T0)
    rates = {r.queue: r.rate for r in queue_rows(frame)}
    assert rates == {"a": 30.0, "c": -2.0}  # b emptied: no live runs, no row


def test_the_screen_names_queues_and_says_when_there_is_nothing() -> None:
    console = Console(width=140, record=True)
    console.print(render(Frame(overview=overview(T0, depth("mail", RunState.QUEUED, 7, T0)))))
    text = console.export_text()
    assert "mail" in text
    assert "(none)" in text  # no subscriptions, no dead runs
    assert "no fires in the last hour" in text
