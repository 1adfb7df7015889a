"""The overview's chart: runs ended per minute by outcome, as inline SVG drawn on the server.

:func:`bars` groups the stats' per-minute buckets into bars (one minute each over an hour, a
quarter of an hour each over a day); :func:`svg` draws them as stacked bars, one colour per
outcome (the page's state colours, so the dark theme recolours them), each bar with a
``<title>`` saying its time and counts, and the whole with a title and a description a screen
reader reads. Pure: no request, no store, no clock.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

from ..services.stats import Bucket

SERIES: tuple[str, ...] = ("succeeded", "failed", "dead", "cancelled", "skipped")
"""The outcomes drawn, bottom to top (the terminal states a run ends in)."""
WINDOWS: dict[int, str] = {3600: "last hour", 86_400: "last day"}
"""The windows the chart offers (seconds) and their names."""
WIDTH = 960
HEIGHT = 260
_LEFT = 40  # room for the y-axis labels
_BOTTOM = 22  # room for the x-axis labels
_TOP = 8
_LABELS = 6  # x-axis labels, about


@dataclass(frozen=True, slots=True, kw_only=True)
class Bar:
    """Runs ended in ``[start, start + seconds)``, by outcome."""

    start: float
    seconds: float
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Runs ended in the bar's time."""
        return sum(self.counts.values())


def minutes_per_bar(window: int) -> int:
    """How many minutes one bar covers for a window of ``window`` seconds (about 100 bars or
    fewer: 1 minute up to two hours, 15 minutes up to a day, an hour beyond)."""
    if window <= 7200:
        return 1
    if window <= 86_400:
        return 15
    return 60


def bars(buckets: Sequence[Bucket], minutes: int) -> list[Bar]:
    """``buckets`` (whole minutes, oldest first) grouped into bars of ``minutes`` minutes on
    round boundaries (a quarter bar starts at :00, :15, :30, :45); the first and last bar may
    hold fewer minutes than the others."""
    if minutes < 1:
        raise ValueError(f"minutes must be 1 or more, got {minutes}")
    size = minutes * 60.0
    grouped: dict[float, dict[str, int]] = {}
    for bucket in buckets:
        start = math.floor(bucket.start / size) * size
        counts = grouped.setdefault(start, dict.fromkeys(SERIES, 0))
        for state in SERIES:
            counts[state] += bucket.counts.get(state, 0)
    return [Bar(start=start, seconds=size, counts=grouped[start]) for start in sorted(grouped)]


def totals(shown: Sequence[Bar]) -> dict[str, int]:
    """Runs ended over all of ``shown``, by outcome."""
    return {state: sum(bar.counts.get(state, 0) for bar in shown) for state in SERIES}


def clock(epoch: float, with_date: bool = False) -> str:
    """A time of day in UTC (``14:05``), with the date when asked (``05-31 14:05``)."""
    stamp = dt.datetime.fromtimestamp(epoch, dt.UTC)
    return stamp.strftime("%m-%d %H:%M" if with_date else "%H:%M")


def describe(bar: Bar) -> str:
    """What a bar says in words: ``14:05-14:06 UTC: 3 succeeded, 1 dead``."""
    span = f"{clock(bar.start)}-{clock(bar.start + bar.seconds)} UTC"
    parts = [f"{bar.counts[state]} {state}" for state in SERIES if bar.counts.get(state)]
    return f"{span}: {', '.join(parts) if parts else 'no run ended'}"


def scale_top(highest: int) -> int:
    """The y axis's top: ``highest`` rounded up to 1, 2 or 5 times a power of ten (at least
    1, so an empty chart still has an axis)."""
    if highest <= 1:
        return 1
    power: int = 10 ** math.floor(math.log10(highest))
    return next(step * power for step in (1, 2, 5, 10) if highest <= step * power)


def svg(shown: Sequence[Bar], *, label: str, element_id: str = "chart-svg") -> Markup:
    """The bars as an inline, accessible SVG ``<svg>`` element.

    ``label`` names the chart (its ``<title>``); its ``<desc>`` gives the totals by outcome.
    Every bar is a ``<g>`` with its own ``<title>`` (its time and counts) and one ``<rect>``
    per outcome with runs, filled with ``currentColor`` of the outcome's ``s-<state>`` class.
    """
    plot_w = WIDTH - _LEFT
    plot_h = HEIGHT - _BOTTOM - _TOP
    top = scale_top(max((bar.total for bar in shown), default=0))
    slot = plot_w / max(1, len(shown))
    gap = min(2.0, slot * 0.2)
    summed = totals(shown)
    desc = ", ".join(f"{summed[s]} {s}" for s in SERIES if summed[s]) or "no run ended"
    out = [
        f'<svg id="{escape(element_id)}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-labelledby="{escape(element_id)}-title {escape(element_id)}-desc" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{escape(element_id)}-title">{escape(label)}</title>',
        f'<desc id="{escape(element_id)}-desc">In all: {escape(desc)}.</desc>',
    ]
    out += _axes(top, plot_h)
    for n, bar in enumerate(shown):
        x = _LEFT + n * slot + gap / 2
        width = max(0.5, slot - gap)
        out.append(f'<g class="bar" data-start="{bar.start:.0f}">')
        out.append(f"<title>{escape(describe(bar))}</title>")
        # A clear full-height rect, so a bar's title shows on hover however short it is.
        out.append(
            f'<rect class="hit" x="{x:.2f}" y="{_TOP}" width="{width:.2f}" '
            f'height="{plot_h}" fill="transparent"/>'
        )
        base = float(_TOP + plot_h)
        for state in SERIES:
            count = bar.counts.get(state, 0)
            if not count:
                continue
            height = plot_h * count / top
            base -= height
            out.append(
                f'<rect class="s-{state}" fill="currentColor" x="{x:.2f}" y="{base:.2f}" '
                f'width="{width:.2f}" height="{height:.2f}"/>'
            )
        out.append("</g>")
    out += _times(shown, slot)
    out.append("</svg>")
    return Markup("".join(out))


def _axes(top: int, plot_h: int) -> list[str]:
    """The y axis: a line at the base, the top value and half of it, with labels."""
    lines = []
    for value in (0, top / 2, top):
        y = _TOP + plot_h - plot_h * value / top
        shown = f"{value:g}"
        lines.append(
            f'<line class="grid" x1="{_LEFT}" x2="{WIDTH}" y1="{y:.2f}" y2="{y:.2f}" '
            'stroke="currentColor" stroke-opacity="0.2"/>'
        )
        lines.append(
            f'<text class="axis" x="{_LEFT - 6}" y="{y + 4:.2f}" text-anchor="end" '
            f'fill="currentColor" font-size="12">{shown}</text>'
        )
    return lines


def _times(shown: Sequence[Bar], slot: float) -> list[str]:
    """About :data:`_LABELS` times along the x axis, at bar starts."""
    if not shown:
        return []
    every = max(1, math.ceil(len(shown) / _LABELS))
    dated = shown[-1].start - shown[0].start >= 86_400 - shown[0].seconds
    out = []
    for n in range(0, len(shown), every):
        x = _LEFT + n * slot
        out.append(
            f'<text class="axis" x="{x:.2f}" y="{HEIGHT - 6}" fill="currentColor" '
            f'font-size="12">{escape(clock(shown[n].start, with_date=dated))}</text>'
        )
    return out
