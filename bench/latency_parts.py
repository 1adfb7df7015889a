"""Where the time between a defer and its run's start goes, step by step (issue 15's profile of
the idle defer -> start figure of ``bench/peers.py``).

One ``cronbus worker`` process (``--concurrency`` slots) idles on a fresh store; this process
defers ``--runs`` runs one at a time, ``--gap`` apart, each with ``t0`` = ``time.time()`` just
before its ``defer`` call (the blocking API, as ``bench/peers.py`` measures). The worker's app
(``bench/_parts_app.py``) stamps, in the worker, when a wake-up arrived, when each claim began
and how long it took, and when the body started. For each run:

* ``defer call``: how long ``defer`` took to return (the run is durable then);
* ``t0 -> first wake-up``: the first wake-up of the ``runs`` channel the worker saw after ``t0``
  (on SQLite, sent before the defer's commit; on PostgreSQL, NOTIFY at its commit);
* ``t0 -> claim began``: the start of the claim that took the run;
* ``claim``: that claim's transaction (``complete_and_claim``);
* ``claim end -> body``: from the claim's return to the body's first line (the hand-off to a
  slot thread);
* ``t0 -> body``: the whole, as ``bench/peers.py`` reports it.

With ``--due-in S``, each run is deferred due ``S`` seconds after its ``t0`` (``eta=``), and
the parts after the defer are measured from that due time instead: the worker wakes by its own
timer (wake-ups only tell it of the new due time), so ``due -> claim began`` is the timer's
lateness and the list of queues read, and ``due -> body`` is the delayed-run lateness of
``bench/peers.py``.

Figures in milliseconds: p50, p90, p99. Example:
``.venv/bin/python bench/latency_parts.py --store sqlite,postgres``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import (
    PG_SERVER,
    fresh_pg_schema,
    percentile,
    print_environment,
    stop_processes,
    worker_env,
)

_PARTS = (
    "defer call",
    "t0 -> first wake-up",
    "t0 -> claim began",
    "claim",
    "claim end -> body",
    "t0 -> body",
)


@contextlib.contextmanager
def _fresh_store(kind: str, folder: Path) -> Iterator[str]:
    """A new SQLite file in ``folder``, or a new schema on the local PostgreSQL (dropped after)."""
    if kind == "sqlite":
        yield f"sqlite:///{folder / 'parts.db'}"
        return
    with fresh_pg_schema(PG_SERVER, "bench_parts") as url:
        yield url


def _wait_for(what: str, check: Any, timeout: float, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited ({worker.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def _bodies(log: Path) -> list[dict[str, Any]]:
    return [e for e in _events(log) if e["ev"] == "body"]


def _events(log: Path) -> list[dict[str, Any]]:
    with open(log) as f:
        return [json.loads(line) for line in f if line.strip()]


def measure(kind: str, args: argparse.Namespace, folder: Path) -> dict[str, list[float]]:
    """Defer ``--runs`` runs at an idle worker; the parts of each run's latency, in ms (from
    the defer call's start, or with ``--due-in`` from the run's due time)."""
    from _parts_app import app, stamp

    log = folder / f"parts-{kind}.jsonl"
    log.write_text("")
    with _fresh_store(kind, folder) as url:
        app.use_store(url)
        with app:
            command = [sys.executable, "-m", "cronbus", "worker", "--app", "_parts_app:app"]
            command += ["--store", url, "--concurrency", str(args.concurrency)]
            command += ["--no-connectors", "--log-level", "warning"]
            env = {**worker_env(), "PARTS_LOG": str(log)}
            worker = subprocess.Popen(command, env=env)
            try:
                for _ in range(args.warmup):
                    before = len(_bodies(log))
                    stamp.defer(time.time())
                    _wait_for("a warm-up run", lambda n=before: len(_bodies(log)) > n, 60, worker)
                time.sleep(0.2)
                log.write_text("")
                calls = []
                for _ in range(args.runs):
                    t0 = time.time()
                    if args.due_in:
                        stamp.defer(t0 + args.due_in, eta=t0 + args.due_in)
                    else:
                        stamp.defer(t0)
                    calls.append((t0, time.time()))
                    time.sleep(args.gap)
                _wait_for("every run", lambda: len(_bodies(log)) >= args.runs, 60, worker)
            finally:
                stop_processes([worker], 10.0)
    return _parts(_events(log), calls)


def _parts(
    events: list[dict[str, Any]], calls: list[tuple[float, float]]
) -> dict[str, list[float]]:
    wakes = sorted(e["t"] for e in events if e["ev"] == "wake" and "runs" in e["channels"])
    claims = sorted(
        (e for e in events if e["ev"] == "exchange" and e["claimed"]), key=lambda e: e["t"]
    )
    parts: dict[str, list[float]] = {name: [] for name in _PARTS}
    for t0, returned in calls:
        parts["defer call"].append(returned - t0)
    # The body's t0 is the defer call's start, or with --due-in the run's due time.
    for body in (e for e in events if e["ev"] == "body"):
        t0, started = body["t0"], body["t"]
        parts["t0 -> body"].append(started - t0)
        wake = next((t for t in wakes if t >= t0), None)
        if wake is not None and wake <= started:
            parts["t0 -> first wake-up"].append(wake - t0)
        # The claim that took it: the last claim with runs that began before the body started.
        taken = [c for c in claims if t0 <= c["t"] <= started]
        if taken:
            claim = taken[-1]
            parts["t0 -> claim began"].append(claim["t"] - t0)
            parts["claim"].append(claim["took"])
            parts["claim end -> body"].append(started - claim["t"] - claim["took"])
    return {name: [v * 1000 for v in values] for name, values in parts.items()}


def _due_name(part: str) -> str:
    """A part's name when it is measured from the due time (``--due-in``)."""
    return part.replace("t0 ->", "due ->")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--runs", type=int, default=300, help="runs deferred (default 300)")
    parser.add_argument("--gap", type=float, default=0.01, help="seconds between defers")
    parser.add_argument("--warmup", type=int, default=5, help="runs deferred and left out")
    parser.add_argument("--concurrency", type=int, default=8, help="the worker's slots")
    parser.add_argument(
        "--due-in",
        type=float,
        default=0.0,
        help="defer each run due this many seconds later, and measure from its due time",
    )
    args = parser.parse_args()
    kinds = [k.strip() for k in args.store.split(",") if k.strip()]
    for kind in kinds:
        if kind not in ("sqlite", "postgres"):
            parser.error(f"--store takes sqlite, postgres or both, not {kind!r}")
    print_environment()
    with tempfile.TemporaryDirectory(prefix="cronbus-parts-") as folder:
        for kind in kinds:
            parts = measure(kind, args, Path(folder))
            what = "defer -> start"
            if args.due_in:
                what = f"due time (defer + {args.due_in:g} s) -> start"
                # Wake-ups then tell of other runs' defers, not of this run coming due.
                parts.pop("t0 -> first wake-up")
                parts = {_due_name(name): values for name, values in parts.items()}
            print(
                f"\n=== {kind}: {what}, step by step (ms; {args.runs} runs, "
                f"{args.gap * 1000:g} ms apart, load1={os.getloadavg()[0]:.1f}) ==="
            )
            print(f"{'part':24s} {'n':>5s} {'p50':>7s} {'p90':>7s} {'p99':>7s}")
            for name, values in parts.items():
                cells = [percentile(values, p) for p in (50, 90, 99)]
                print(f"{name:24s} {len(values):5d} " + " ".join(f"{c:7.2f}" for c in cells))


if __name__ == "__main__":
    main()
