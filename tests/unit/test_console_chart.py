"""The overview's chart (cronbus.console.chart): grouping minutes into bars, the y scale, and
the SVG it draws (parsed as XML: a title per bar, a rect per outcome with runs, accessible
names)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from cronbus.console import chart
from cronbus.services.stats import Bucket

NS = {"svg": "http://www.w3.org/2000/svg"}
T0 = 1_717_243_200.0  # 2024-06-01 12:00:00 UTC


def minute(n: int, **counts: int) -> Bucket:
    full = {state: counts.get(state, 0) for state in chart.SERIES}
    return Bucket(start=T0 + 60 * n, counts=full, total=sum(full.values()))


def test_one_minute_bars_keep_every_minute() -> None:
    found = chart.bars([minute(0, succeeded=2), minute(1), minute(2, dead=1)], 1)
    assert [bar.start for bar in found] == [T0, T0 + 60, T0 + 120]
    assert [bar.total for bar in found] == [2, 0, 1]
    assert found[2].counts["dead"] == 1
    assert found[2].seconds == 60


def test_quarter_bars_start_on_round_quarters_and_sum_their_minutes() -> None:
    # 12:10 to 12:39: bars 12:00 (5 minutes), 12:15 (15), 12:30 (10).
    buckets = [minute(n, succeeded=1, failed=n % 2) for n in range(10, 40)]
    found = chart.bars(buckets, 15)
    assert [chart.clock(bar.start) for bar in found] == ["12:00", "12:15", "12:30"]
    assert [bar.counts["succeeded"] for bar in found] == [5, 15, 10]
    assert [bar.counts["failed"] for bar in found] == [2, 8, 5]
    assert all(bar.seconds == 900 for bar in found)


def test_bars_refuse_a_size_below_a_minute() -> None:
    with pytest.raises(ValueError, match="minutes must be 1 or more"):
        chart.bars([minute(0)], 0)


@pytest.mark.parametrize(
    ("window", "expected"), [(3600, 1), (7200, 1), (86_400, 15), (7 * 86_400, 60)]
)
def test_minutes_per_bar_keeps_about_a_hundred_bars(window: int, expected: int) -> None:
    assert chart.minutes_per_bar(window) == expected


@pytest.mark.parametrize(
    ("highest", "top"), [(0, 1), (1, 1), (2, 2), (3, 5), (7, 10), (10, 10), (11, 20), (450, 500)]
)
def test_scale_top_rounds_up_to_1_2_5(highest: int, top: int) -> None:
    assert chart.scale_top(highest) == top


def test_describe_names_the_time_and_each_outcome_with_runs() -> None:
    bar = chart.Bar(start=T0 + 300, seconds=60, counts={"succeeded": 3, "dead": 1, "failed": 0})
    assert chart.describe(bar) == "12:05-12:06 UTC: 3 succeeded, 1 dead"
    empty = chart.Bar(start=T0, seconds=900, counts=dict.fromkeys(chart.SERIES, 0))
    assert chart.describe(empty) == "12:00-12:15 UTC: no run ended"


def parse(markup: str) -> ET.Element:
    return ET.fromstring(str(markup))


def test_svg_draws_stacked_rects_per_outcome_with_a_title_per_bar() -> None:
    shown = chart.bars([minute(0, succeeded=4), minute(1), minute(2, succeeded=1, dead=3)], 1)
    root = parse(chart.svg(shown, label="Runs per minute"))
    assert root.get("role") == "img"
    labelled = root.get("aria-labelledby", "").split()
    titles = {el.get("id"): el.text for el in root.iter(f"{{{NS['svg']}}}title")}
    assert titles[labelled[0]] == "Runs per minute"
    desc = root.find("svg:desc", NS)
    assert desc is not None
    assert desc.get("id") == labelled[1]
    assert desc.text == "In all: 5 succeeded, 3 dead."
    groups = root.findall("svg:g", NS)
    assert len(groups) == 3
    bar_titles = [g.find("svg:title", NS).text for g in groups]  # type: ignore[union-attr]
    assert bar_titles[1] == "12:01-12:02 UTC: no run ended"
    assert bar_titles[2] == "12:02-12:03 UTC: 1 succeeded, 3 dead"
    coloured = [
        [r.get("class") for r in g.findall("svg:rect", NS) if r.get("class") != "hit"]
        for g in groups
    ]
    assert coloured == [["s-succeeded"], [], ["s-succeeded", "s-dead"]]
    # The tallest bar (4 runs) reaches the top of a 0..5 scale at 4/5 of the plot; the third
    # bar stacks dead on succeeded with no gap.
    rects = groups[2].findall("svg:rect", NS)[1:]
    ok, dead = (float(r.get("height", "0")) for r in rects)
    assert dead == pytest.approx(3 * ok)
    assert float(rects[1].get("y", "0")) + dead == pytest.approx(float(rects[0].get("y", "0")))
    assert all(r.get("fill") == "currentColor" for r in rects)


def test_svg_of_nothing_is_still_a_chart_with_an_axis() -> None:
    root = parse(chart.svg([], label="Nothing"))
    desc = root.find("svg:desc", NS)
    assert desc is not None
    assert desc.text == "In all: no run ended."
    assert root.findall("svg:g", NS) == []
    assert [t.text for t in root.findall("svg:text", NS)] == ["0", "0.5", "1"]


def test_svg_escapes_its_label() -> None:
    root = parse(chart.svg([], label="<b>&"))
    title = root.find("svg:title", NS)
    assert title is not None
    assert title.text == "<b>&"


def test_a_day_of_quarters_labels_times_with_dates() -> None:
    day = [minute(n) for n in range(0, 1440)]
    shown = chart.bars(day, 15)
    assert len(shown) == 96
    labels = [t.text for t in parse(chart.svg(shown, label="day")).findall("svg:text", NS)]
    assert "06-01 12:00" in labels
