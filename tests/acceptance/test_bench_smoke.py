"""The benchmarks still run: ``bench/run.py --quick`` end to end (figures are not judged here).

A refactor once broke a benchmark without any test noticing; this runs every script with small
sizes, on SQLite, and checks that each printed its figures and the summary.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ("defer", "throughput", "latency", "precision", "scale", "delivery", "cron")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_benchmark_runs_with_quick_sizes() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    summary = done.stdout[done.stdout.rindex("\nbenchmark ") :]
    for name in BENCHMARKS:
        assert f"\n{name}" in summary, f"{name} printed no figure:\n{summary}"
