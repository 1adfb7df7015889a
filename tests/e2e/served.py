"""The console the browser tests look at: a real ``cronbus server`` process (app
``apps.console_app``) on an SQLite file, seeded with realistic data, and a loopback webhook
receiver for its webhook subscription.

Before the server starts, :func:`seed` opens the app on the file and makes the tokens, a second
namespace, events, a task and a webhook subscription, and runs: some that succeed, one that
fails with a traceback, one that fails once (a dead letter that succeeds when requeued), one
that runs for a long time, and two scheduled ones. Runs that ended in the hour before are
executed in the test process on a clock of their own. Once the server listens, the
``every_minute`` job is triggered three times, a bulk cancel of the scheduled runs gives an
operation, and :func:`start` waits until the seeded runs have ended.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from apps import console_app
from cronbus import App
from cronbus.clock import SystemClock
from cronbus.services import EventInput, Services, SubscriptionInput
from cronbus.testing import FakeClock, run_until_idle_async

TESTS = Path(__file__).resolve().parents[1]
URL = re.compile(r"cronbus API listening on (http://127\.0\.0\.1:\d+)")
DEADLINE = 60.0
"""Seconds the server gets to listen, and the seeded runs to end, on a busy machine."""
WORKER = "console-worker-1"
CARD = "4242 4242 4242 4242"
"""The card number of the seeded refund, which no page may show."""
HISTORY_MINUTES = 55
"""How far back the seeded runs that ended before the server started go."""


@dataclass(frozen=True, slots=True)
class Tokens:
    """API tokens of each kind, as their text."""

    admin: str
    write: str
    read: str
    no_payloads: str
    """Read scope, and arguments and results hidden (``payloads=False``)."""


@dataclass(frozen=True, slots=True)
class Server:
    """A served console and what was seeded into it."""

    url: str
    tokens: Tokens
    failed_run: int
    """A dead run of ``boom``: its attempt failed with a ValueError traceback."""
    dead_letter: int
    """A dead run of ``charge``: requeued, it succeeds."""
    ok_run: int
    """A succeeded run of ``ok`` (arguments ``order=1001, customer="ada"``)."""
    refund: int
    """A succeeded run of ``refund``, whose ``card`` argument the task redacts."""
    operation: int
    """A finished bulk cancel of the two scheduled runs."""
    log: Path


class _Receiver(BaseHTTPRequestHandler):
    """Answers webhook pushes: 200, or 500 for refunds (their deliveries end dead)."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        failing = b"order.refunded" in body
        self.send_response(500 if failing else 200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "ledger closed"}' if failing else b'{"ok": true}')

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the deliveries, not this log."""


@contextmanager
def webhook_receiver() -> Iterator[str]:
    """A webhook endpoint on 127.0.0.1 (a free port) while the block runs: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/billing"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@dataclass(frozen=True, slots=True)
class _Seeded:
    tokens: Tokens
    failed_run: int
    dead_letter: int
    ok_runs: tuple[int, ...]
    refund: int
    scheduled: tuple[int, ...]


async def _token(services: Services, name: str, scope: str, *, payloads: bool = True) -> str:
    namespaces = ["*"] if scope == "admin" else ["default"]
    _, text = await services.tokens.create(name, scope, namespaces, payloads=payloads)
    return text


async def _history(app: App) -> None:
    """Runs that ended over the last hour, executed here on a clock of their own, so the
    overview's chart and the runs table have a past: a few orders every five minutes, and now
    and then a failure."""
    clock = FakeClock(time.time() - HISTORY_MINUTES * 60)
    app.clock = clock
    try:
        runs = app.services().runs
        for step in range(HISTORY_MINUTES // 5):
            for n in range(2 + step % 3):
                await runs.defer("ok", kwargs={"order": 900 + 10 * step + n, "customer": "ada"})
            if step % 4 == 1:
                await runs.defer("boom", kwargs={"reason": "the bank timed out"})
            await run_until_idle_async(app, raise_errors=False)
            clock.advance(300.0)
    finally:
        app.clock = SystemClock()


async def seed(url: str, webhook: str) -> _Seeded:
    """Fill a fresh store with the data the pages show (the server is not running yet)."""
    app = console_app.app
    app.use_store(url)
    async with app:
        await _history(app)
        services = app.services()
        tokens = Tokens(
            admin=await _token(services, "ops-admin", "admin"),
            write=await _token(services, "deploy-bot", "write"),
            read=await _token(services, "on-call (read only)", "read"),
            no_payloads=await _token(services, "support (no payloads)", "read", payloads=False),
        )
        await services.namespaces.create("staging")
        orders = [
            EventInput(type="order.created", subject=f"order/{n}", data={"order": n, "total": t})
            for n, t in ((1001, 4200), (1002, 1999), (1003, 15000))
        ]
        orders.append(EventInput(type="order.refunded", subject="order/1002", data={"order": 1002}))
        await services.topics.publish("orders", orders)
        await services.topics.publish(
            "customers", [EventInput(type="customer.signed_up", data={"customer": "grace"})]
        )
        await services.subscriptions.create(
            SubscriptionInput(
                name="billing-webhook",
                topic="orders",
                webhook=webhook,
                types=["order.*"],
                start="earliest",
                max_attempts=2,
                backoff=0.2,
            )
        )
        await services.subscriptions.create(
            SubscriptionInput(
                name="orders-to-task", topic="orders", task="on_order", start="earliest"
            )
        )
        runs = services.runs
        ok_runs = [
            (await runs.defer("ok", kwargs={"order": n, "customer": who})).run.id
            for n, who in ((1001, "ada"), (1002, "grace"), (1003, "linus"), (1004, "barbara"))
        ]
        failed = (await runs.defer("boom", kwargs={"reason": "card expired"})).run.id
        dead = (await runs.defer("charge", kwargs={"invoice": "INV-2041"})).run.id
        refund = await runs.defer("refund", kwargs={"order": 1002, "card": CARD})
        await runs.defer("slow", kwargs={"seconds": 3600.0})
        scheduled = [
            (await runs.defer("slow", kwargs={"seconds": 5.0}, delay=3600.0)).run.id
            for _ in range(2)
        ]
    return _Seeded(tokens, failed, dead, tuple(ok_runs), refund.run.id, tuple(scheduled))


def _in_thread(work: Callable[[], Any]) -> Any:
    """``work()`` on a thread of its own (the test thread hosts Playwright's loop)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(work())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def environment() -> dict[str, str]:
    """The server's environment: no CRONBUS_* of the caller, the test apps importable,
    settings that keep a short test short (no API rate limit, quick polls and stops)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    return {
        **kept,
        "PYTHONPATH": os.pathsep.join([str(TESTS), kept.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
        "CRONBUS_API_RATE": "100000",
        "CRONBUS_API_AUTH_FAILURE_BURST": "100000",
        "CRONBUS_POLL_SECONDS": "0.5",
        "CRONBUS_GRACE_SECONDS": "1",
    }


def _listening(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = URL.search(log.read_text(errors="replace"))
        if found:
            return found[1]
        if proc.poll() is not None:
            raise AssertionError(f"the server exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.1)
    raise AssertionError(f"the server printed no URL in {DEADLINE} s:\n{log.read_text()}")


def until(check: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.1)


def _settled(client: httpx.Client, wanted: dict[int, str]) -> Callable[[], bool]:
    def check() -> bool:
        states = {i: client.get(f"/v1/runs/{i}").json()["run"]["state"] for i in wanted}
        workers = client.get("/v1/workers").json()["items"]
        return states == wanted and any(w["worker"]["id"] == WORKER for w in workers)

    return check


def _fire(client: httpx.Client, job: str) -> int:
    """Trigger ``job`` once its scheduler has synced it from the code: the run's id."""
    fired: list[int] = []

    def trigger() -> bool:
        response = client.post(f"/v1/jobs/{job}/trigger")
        if response.status_code == 201:
            fired.append(response.json()["id"])
        return bool(fired)

    until(trigger, f"job {job} triggered")
    return fired[0]


def _operation(client: httpx.Client, scheduled: tuple[int, ...]) -> int:
    response = client.post("/v1/operations", json={"kind": "runs.cancel", "ids": list(scheduled)})
    assert response.status_code == 202, response.text
    op_id: int = response.json()["id"]
    until(
        lambda: client.get(f"/v1/operations/{op_id}").json()["state"] == "succeeded",
        f"operation {op_id} succeeded",
    )
    return op_id


@contextmanager
def start(tmp: Path) -> Iterator[Server]:
    """A seeded ``cronbus server`` on a new SQLite file in ``tmp``; stopped (SIGTERM, then
    SIGKILL) when the block ends."""
    url = f"sqlite:///{tmp / 'console.db'}"
    log = tmp / "server.log"
    with webhook_receiver() as hook:
        seeded: _Seeded = _in_thread(lambda: asyncio.run(seed(url, hook)))
        command = [sys.executable, "-m", "cronbus", "server", "--app", "apps.console_app"]
        options = ["--store", url, "--api-port", "0", "--name", WORKER, "--labels", "eu-west"]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*command, *options, "--concurrency", "4"],
                env=environment(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            base = _listening(proc, log)
            auth = {"Authorization": f"Bearer {seeded.tokens.admin}"}
            with httpx.Client(base_url=base, headers=auth, timeout=10.0) as client:
                wanted = {seeded.failed_run: "dead", seeded.dead_letter: "dead"}
                wanted.update(dict.fromkeys([*seeded.ok_runs, seeded.refund], "succeeded"))
                wanted.update({_fire(client, "every_minute"): "succeeded" for _ in range(3)})
                until(_settled(client, wanted), "seeded runs ended, worker registered")
                operation = _operation(client, seeded.scheduled)
            yield Server(
                url=base,
                tokens=seeded.tokens,
                failed_run=seeded.failed_run,
                dead_letter=seeded.dead_letter,
                ok_run=seeded.ok_runs[0],
                refund=seeded.refund,
                operation=operation,
                log=log,
            )
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def api_json(server: Server, path: str) -> Any:
    """GET ``/v1{path}`` with the admin token: the decoded body."""
    auth = {"Authorization": f"Bearer {server.tokens.admin}"}
    response = httpx.get(f"{server.url}/v1{path}", headers=auth, timeout=10.0)
    response.raise_for_status()
    return json.loads(response.text)
