"""Shared pieces of the service tests: an app with a few tasks on a real SQLite file (or a
PostgreSQL schema), and runs driven to a state through the store itself (no mocks)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contract.pg import pg_store_url
from cronbus import App
from cronbus.config import Settings
from cronbus.model import ClaimRequest, ErrorInfo, Outcome, QueueShare
from cronbus.services import Access, Scope
from cronbus.states import AttemptOutcome

app = App()


@app.task(name="add")
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@app.task(name="send", queue="mail", retries=2)
def send(to: str) -> None:
    """Pretend to send mail."""


READER = Access(actor="reader", scope=Scope.READ, namespaces=frozenset({"default"}))
WRITER = Access(actor="writer", scope=Scope.WRITE, namespaces=frozenset({"default"}))
OTHER = Access(actor="other", scope=Scope.WRITE, namespaces=frozenset({"other"}))


STORES = ("sqlite", "postgres")
"""The stores each service test runs on (``opened`` fixtures take them as params)."""


@contextlib.asynccontextmanager
async def open_on(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tasks' app on a fresh store of the kind ``request.param`` names: a SQLite file
    in ``tmp_path``, or a PostgreSQL schema dropped after the test."""
    store: str | Path = tmp_path
    if request.param == "postgres":
        store = await pg_store_url(request)
    async with open_app(store) as opened:
        yield opened


@contextlib.asynccontextmanager
async def open_app(store: str | Path) -> AsyncIterator[App]:
    """The tasks' app, open on ``store`` (a URL, or a directory for a fresh SQLite file)."""
    url = f"sqlite:///{store / 'services.db'}" if isinstance(store, Path) else store
    app.use_store(url)
    app.settings = Settings(lease_seconds=3.0, poll_seconds=1.0, grace_seconds=5.0)
    async with app:
        yield app


async def end_run(opened: App, run_id: int, outcome: AttemptOutcome) -> None:
    """Claim ``run_id`` (the only claimable run of its queue) as a worker would and end its
    attempt with ``outcome``, giving up (no retry): a failure makes it dead."""
    run = await opened.store.get_run(run_id)
    request = ClaimRequest(
        worker_id="w-test",
        queues=[QueueShare(name=run.queue, limit=1)],
        limit=1,
        lease_seconds=30.0,
        namespace=run.namespace,
    )
    (claimed,) = await opened.store.claim(request, opened.clock.now())
    assert claimed.run_id == run_id
    error = None if outcome is AttemptOutcome.SUCCEEDED else ErrorInfo(type="E", message="boom")
    (ok,) = await opened.store.complete(
        [
            Outcome(
                run_id=run_id,
                attempt_id=claimed.attempt_id,
                outcome=outcome,
                error=error,
                fence=claimed.fence,
            )
        ],
        opened.clock.now(),
    )
    assert ok
