"""Next fires per second of cron triggers: the pure computation the scheduler does for each job.

Each figure steps ``t = trigger.next_fire(t)`` over ``--steps`` fires of one expression, from
2026-01-01 UTC, and reports fires computed per second of CPU-bound wall time (the best of
``--repeat`` runs, so that a busy machine's pauses do not count). The trigger is built once, as
the scheduler does (it caches triggers), so parsing is not measured: ``parse`` measures that
(``parse cached``: the same with the compiled-expression cache warm, as when many jobs share
a few schedules).

Expressions (zone Europe/Paris unless said): every minute, every 5 minutes on weekdays, daily at
09:30, every second (6 fields), the last Friday of the month, the 13th or a Friday (the OR rule),
and a Quartz expression (noon on the third Friday).

Example: ``.venv/bin/python bench/cron.py --steps 5000 --repeat 3``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

from _common import Figure, exit_on_sigterm, heading, print_environment, print_table, report
from cronbus.triggers import Cron

BENCH = "cron"
START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
# name: (expression, zone)
CASES: dict[str, tuple[str, str]] = {
    "every minute": ("* * * * *", "Europe/Paris"),
    "5 min weekdays": ("*/5 * * * MON-FRI", "Europe/Paris"),
    "daily 09:30": ("30 9 * * *", "Europe/Paris"),
    "every second": ("* * * * * *", "Europe/Paris"),
    "last friday": ("0 0 * * 5L", "UTC"),
    "13th or friday": ("0 0 13 * 5", "America/New_York"),
    "quartz 6#3": ("0 0 12 ? * 6#3", "UTC"),
}


def _rate(trigger: Cron, steps: int) -> float:
    """Fires computed per second, stepping from START."""
    after: float | None = START
    started = time.perf_counter()
    for _ in range(steps):
        assert after is not None
        after = trigger.next_fire(after)
    return steps / (time.perf_counter() - started)


def _cronsim_rate(expr: str, zone: str, steps: int) -> float | None:
    """The same for cronsim (an independent parser, the test suite's reference), stepping its
    iterator from START; None where cronsim is not installed or cannot read ``expr``."""
    try:
        from zoneinfo import ZoneInfo

        from cronsim import CronSim
    except ImportError:
        return None
    try:
        it = CronSim(expr, datetime.fromtimestamp(START, ZoneInfo(zone)))
    except Exception:  # a form cronsim does not read (seconds, Quartz)
        return None
    started = time.perf_counter()
    for _ in range(steps):
        next(it)
    return steps / (time.perf_counter() - started)


def _parse_rate(n: int, *, cached: bool) -> float:
    """Triggers built per second (expression parsed and checked, zone looked up).

    Plain Vixie expressions only, which every implementation measured so far reads. With
    ``cached=False`` any cache of compiled expressions (``cronbus.cron.compile_cron``) is
    emptied before each build, so the parse itself is measured.
    """
    exprs = ["* * * * *", "*/5 * * * MON-FRI", "30 9 * * *", "* * * * * *", "0 0 13 * 5"]
    clear = _cache_clear() if not cached else None
    started = time.perf_counter()
    for i in range(n):
        if clear is not None:
            clear()
        Cron(expr=exprs[i % len(exprs)], tz="Europe/Paris", seed=str(i), jitter=1.0)
    return n / (time.perf_counter() - started)


def _cache_clear() -> Callable[[], None] | None:
    """The function that empties the compiled-expression cache, when there is one."""
    try:
        from cronbus.cron import compile_cron
    except ImportError:  # before cronbus.cron existed: nothing is cached
        return None
    return compile_cron.cache_clear


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=5000, help="fires per expression (5000)")
    parser.add_argument("--parse", type=int, default=2000, help="triggers built (2000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best counts (3)")
    return parser


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Measure each expression, print the figures, and return them."""
    args = build_parser().parse_args(argv)
    if environment:
        print_environment()
    heading("cron: next fires computed per second (best of the repetitions)")
    figures: list[Figure] = []
    for name, (expr, zone) in CASES.items():
        try:
            trigger = Cron(expr=expr, tz=zone)
        except Exception as exc:  # an implementation that cannot read it: say so, go on
            print(f"[{BENCH}] {name}: {expr!r} refused: {exc}", flush=True)
            continue
        rate = max(_rate(trigger, args.steps) for _ in range(args.repeat))
        settings = {"expr": repr(expr), "tz": zone, "steps": args.steps}
        figures.append(report(Figure(BENCH, name, rate, "fires/s", settings)))
        rates = [_cronsim_rate(expr, zone, args.steps) for _ in range(args.repeat)]
        if None not in rates:
            best = max(r for r in rates if r is not None)
            figures.append(report(Figure(BENCH, f"{name} (cronsim)", best, "fires/s", settings)))
    for name, cached in (("parse", False), ("parse cached", True)):
        rate = max(_parse_rate(args.parse, cached=cached) for _ in range(args.repeat))
        settings = {"n": args.parse, "cache": cached}
        figures.append(report(Figure(BENCH, name, rate, "triggers/s", settings)))
    if environment:
        heading("summary")
        print_table(figures)
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    main(sys.argv[1:])
