"""Acceptance: ``cronbus runs purge`` as a subprocess, on both stores: what it removes by age
and state, its ``--json`` document (nothing else on stdout or stderr), and bad input refused
with one line before the store is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from contract.pg import pg_store_url
from cronbus.errors import RunNotFoundError
from cronbus.model import ClaimRequest, ErrorInfo, NewRun, Outcome, QueueShare
from cronbus.states import AttemptOutcome, RunState
from cronbus.store import Store, open_store

DAY = 86_400.0


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each kind (PostgreSQL: skipped locally when absent, failed in CI)."""
    if request.param == "postgres":
        return await pg_store_url(request)
    return f"sqlite:///{tmp_path / 'purge.db'}"


@dataclass(frozen=True)
class Cli:
    """``cronbus`` against one store, with no CRONBUS_* variable of the caller's."""

    url: str
    cwd: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
        return subprocess.run(
            [sys.executable, "-m", "cronbus", *args, "--store", self.url],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


async def _ended(store: Store, at: float, outcome: AttemptOutcome) -> int:
    """A run that ended at ``at`` with ``outcome`` (one attempt: a failure is dead)."""
    (done,) = await store.defer([NewRun(task="t", queue="q", eta=at)], at)
    request = ClaimRequest(
        worker_id="w", queues=[QueueShare(name="q", limit=1)], limit=1, lease_seconds=30
    )
    (claimed,) = await store.claim(request, at)
    error = None if outcome is AttemptOutcome.SUCCEEDED else ErrorInfo(type="E", message="x")
    ended = Outcome(
        run_id=claimed.run_id, attempt_id=claimed.attempt_id, outcome=outcome, error=error
    )
    await store.complete([ended], at)
    return done.id


@dataclass
class Seeded:
    old_ok: list[int]
    old_dead: list[int]
    old_cancelled: int
    recent_ok: int
    waiting: int


async def _seed(url: str) -> Seeded:
    store = open_store(url)
    await store.open()
    try:
        now = time.time()
        old_ok = [await _ended(store, now - 3 * DAY, AttemptOutcome.SUCCEEDED) for _ in range(3)]
        old_dead = [await _ended(store, now - 2 * DAY, AttemptOutcome.FAILED) for _ in range(2)]
        (cancelled,) = await store.defer([NewRun(task="t", queue="later", eta=now + DAY)], now)
        await store.cancel(cancelled.id, now - 3 * DAY)
        recent = await _ended(store, now - 60, AttemptOutcome.SUCCEEDED)
        (waiting,) = await store.defer([NewRun(task="t", queue="q", eta=now - 4 * DAY)], now)
        return Seeded(old_ok, old_dead, cancelled.id, recent, waiting.id)
    finally:
        await store.close()


async def _present(url: str, ids: list[int]) -> list[int]:
    store = open_store(url)
    await store.open()
    try:
        found = []
        for run_id in ids:
            try:
                await store.get_run(run_id)
            except RunNotFoundError:
                continue
            found.append(run_id)
        return found
    finally:
        await store.close()


async def test_purge_by_age_and_state(url: str, tmp_path: Path) -> None:
    seeded = await _seed(url)
    cli = Cli(url, tmp_path)
    every = [
        *seeded.old_ok,
        *seeded.old_dead,
        seeded.old_cancelled,
        seeded.recent_ok,
        seeded.waiting,
    ]

    dead = cli.run("runs", "purge", "--older-than", "1d", "--state", "dead", "--json")
    assert dead.returncode == 0, dead.stderr
    assert dead.stderr == ""
    assert json.loads(dead.stdout) == {"removed": 2, "states": ["dead"]}

    text = cli.run("runs", "purge", "--older-than", "36h")
    assert text.returncode == 0, text.stderr
    assert text.stdout == "4 runs removed (cancelled, dead, skipped, succeeded)\n"
    assert await _present(url, every) == [seeded.recent_ok, seeded.waiting]

    # 0: every finished run, however young; the waiting run is never purged.
    everything = cli.run("runs", "purge", "--older-than", "0", "--state", "succeeded,skipped")
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout == "1 run removed (skipped, succeeded)\n"
    assert await _present(url, every) == [seeded.waiting]
    again = cli.run("runs", "purge", "--older-than", "0", "--json")
    assert json.loads(again.stdout)["removed"] == 0
    shown = cli.run("runs", "show", str(seeded.waiting), "--json")
    assert json.loads(shown.stdout)["state"] == RunState.QUEUED.value


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--older-than", "-5"), "zero or more"),
        (("--older-than", "1x"), "must be an age"),
        (("--older-than", "0", "--state", "running"), "running runs are not finished"),
        (("--older-than", "0", "--state", "dead,bogus"), "'bogus' is not a run state"),
        ((), "Missing option '--older-than'"),
    ],
)
async def test_bad_input_is_one_clear_line(
    url: str, tmp_path: Path, args: tuple[str, ...], words: str
) -> None:
    seeded = await _seed(url)
    done = Cli(url, tmp_path).run("runs", "purge", *args, "--json")
    assert done.returncode != 0
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert words in done.stderr, done.stderr
    assert len(await _present(url, [*seeded.old_ok, *seeded.old_dead])) == 5
