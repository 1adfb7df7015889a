"""Acceptance: every role command serves Prometheus metrics that move with the work it does.

The roles run as real ``cronbus`` subprocesses on one SQLite file, each with ``--metrics-port
0`` (it prints the URL it got); the test scrapes ``/metrics``, parses it with
``prometheus_client``'s text parser, runs work through (runs that succeed and one that fails,
a job firing every second, events published by a task and pushed to a local HTTP receiver,
one target failing until its circuit opens), and checks each named metric against the scrape
taken before. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cronbus import App

APP_SOURCE = """
import logging

from cronbus import App

app = App()


@app.task(name="add")
def add(a: int, b: int) -> int:
    logging.getLogger("metapp").warning("adding %d and %d", a, b)
    return a + b


@app.task(name="boom", queue="emails")
def boom() -> None:
    raise ValueError("boom")


@app.task(name="emit")
async def emit(count: int) -> int:
    for n in range(count):
        await app.publish_async("orders", type="order.created", data={"n": n})
    return count


@app.job(every=1, name="tick")
def tick() -> None:
    pass
"""
DEADLINE = 60.0
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


# -- helpers -------------------------------------------------------------------------------------
def parse(text: str) -> Samples:
    """Every sample of a scrape, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when absent, as a counter not yet incremented)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape(url: str) -> Samples:
    """Scrape ``url`` and parse it."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return parse(response.read().decode())


def wait_for(url: str, check: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape ``url`` until ``check`` holds, or fail after :data:`DEADLINE` saying what."""
    deadline = time.monotonic() + DEADLINE
    samples: Samples = {}
    while time.monotonic() < deadline:
        samples = scrape(url)
        if check(samples):
            return samples
        time.sleep(0.2)
    shown = {k: v for k, v in samples.items() if not k[0].endswith(("_bucket", "_created"))}
    pytest.fail(f"{what} did not happen within {DEADLINE}s; last scrape: {shown}")


def read_url(process: subprocess.Popen[str], prefix: str) -> str:
    """The URL a role prints after ``prefix`` on stdout (read with a deadline)."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + DEADLINE
    seen = []
    while time.monotonic() < deadline:
        if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
            break
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith(prefix):
            return line[len(prefix) :].split()[0]
    process.kill()
    _, err = process.communicate()
    pytest.fail(f"no {prefix!r} line: stdout {seen}, stderr {err[-2000:]}")


class Receiver(BaseHTTPRequestHandler):
    """A webhook target: 200 on /ok, 500 on anything else."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200 if self.path == "/ok" else 500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[str]:
    """A local HTTP receiver; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Roles:
    """Role processes started in one folder against one store."""

    cwd: Path
    url: str
    env: dict[str, str]
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start ``cronbus ARGS --app metapp:app --store URL``."""
        process = subprocess.Popen(
            [sys.executable, "-m", "cronbus", *args, "--app", "metapp:app", "--store", self.url],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.processes.append(process)
        return process

    def stop_all(self) -> list[str]:
        """SIGTERM every process, wait, and return their stderr."""
        errors = []
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                _, err = process.communicate(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                process.kill()
                _, err = process.communicate()
            errors.append(err)
        return errors


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[Roles]:
    """A folder with ``metapp.py``; processes started there are stopped after the test."""
    (tmp_path / "metapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_")}
    env["CRONBUS_WEBHOOK_ALLOW"] = "127.0.0.0/8"
    env["CRONBUS_POLL_SECONDS"] = "0.5"
    started = Roles(tmp_path, f"sqlite:///{tmp_path / 'm.db'}", env)
    try:
        yield started
    finally:
        started.stop_all()


def test_roles_metric_paths(roles: Roles, receiver: str) -> None:
    """Worker, scheduler, dispatcher and API processes: each named metric moves."""
    seed_app = App(store=roles.url)

    async def seed() -> None:
        async with seed_app:
            subs = seed_app.subscriptions
            await subs.add("hook", topic="orders", webhook=f"{receiver}/ok")
            await subs.add(
                "broken",
                topic="orders",
                webhook=f"{receiver}/fail",
                max_attempts=1,
                circuit_failures=1,
                circuit_probe=600.0,
            )
            await subs.add("idle", topic="orders", webhook=f"{receiver}/ok")
            await subs.pause("idle")

    asyncio.run(seed())
    worker = roles.start(
        "worker", "--metrics-port", "0", "--queues", "default,emails", "--concurrency", "4"
    )
    scheduler = roles.start("scheduler", "--metrics-port", "0")
    dispatcher = roles.start("dispatcher", "--metrics-port", "0")
    api = roles.start("api", "--port", "0", "--metrics-port", "0")
    urls = {
        "worker": read_url(worker, "cronbus metrics on "),
        "scheduler": read_url(scheduler, "cronbus metrics on "),
        "dispatcher": read_url(dispatcher, "cronbus metrics on "),
        "api": read_url(api, "cronbus metrics on "),
    }
    api_port = read_url(api, "cronbus API listening on ") + "/metrics"
    before = {role: scrape(url) for role, url in urls.items()}

    async def work() -> None:
        async with App(store=roles.url) as app:
            add = app.task(name="add")(lambda a, b: a + b)
            boom = app.task(name="boom", queue="emails")(lambda: None)
            emit = app.task(name="emit")(lambda count: count)
            later = app.task(name="later", queue="later")(lambda: None)
            parked = app.task(name="parked", queue="parked")(lambda: None)
            for n in range(3):
                await add.defer_async(n, 1)
            await boom.defer_async()
            await emit.defer_async(3)
            await later.defer_async(delay=3600)
            await later.defer_async(delay=3600)
            await parked.defer_async()  # no worker serves "parked": it stays queued
            await parked.defer_async()

    asyncio.run(work())
    w = wait_for(
        urls["worker"],
        lambda s: (
            value(s, "cronbus_runs_total", task="add", queue="default", outcome="succeeded") >= 3
            and value(s, "cronbus_runs_total", task="boom", queue="emails", outcome="dead") >= 1
            and value(s, "cronbus_events_published_total", topic="orders") >= 3
        ),
        "the worker's runs",
    )
    w0 = before["worker"]
    assert value(w0, "cronbus_runs_total", task="add", queue="default", outcome="succeeded") == 0
    assert value(w, "cronbus_runs_total", task="boom", queue="emails", outcome="failed") == 0
    assert value(w, "cronbus_run_duration_seconds_count", task="add", queue="default") >= 3
    assert value(w, "cronbus_run_duration_seconds_count", task="boom", queue="emails") == 1
    assert value(w, "cronbus_run_start_delay_seconds_count", queue="default") >= 4
    assert value(w, "cronbus_run_start_delay_seconds_count", queue="emails") == 1
    assert (
        value(w, "cronbus_worker_slots", state="busy")
        + value(w, "cronbus_worker_slots", state="free")
        == 4
    )
    claims = value(w, "cronbus_store_transaction_seconds_count", op="complete_and_claim")
    assert claims > value(w0, "cronbus_store_transaction_seconds_count", op="complete_and_claim")
    assert value(w, "cronbus_store_transaction_seconds_count", op="append") >= 1

    s = wait_for(
        urls["scheduler"],
        lambda s: (
            value(s, "cronbus_job_fires_total", job="tick", result="run")
            > value(before["scheduler"], "cronbus_job_fires_total", job="tick", result="run") + 1
        ),
        "the job's fires",
    )
    assert value(s, "cronbus_scheduler_lag_seconds_count") >= 2
    assert value(s, "cronbus_store_transaction_seconds_count", op="fire") >= 2
    assert value(s, "cronbus_job_fires_total", job="tick", result="skipped") == 0

    d = wait_for(
        urls["dispatcher"],
        lambda s: (
            value(s, "cronbus_deliveries_total", subscription="hook", outcome="acked") >= 3
            and value(s, "cronbus_deliveries_total", subscription="broken", outcome="dead") >= 1
            and value(s, "cronbus_circuit_open", subscription="broken") == 1
        ),
        "the deliveries",
    )
    assert value(before["dispatcher"], "cronbus_deliveries_total", subscription="hook") == 0
    assert value(d, "cronbus_delivery_duration_seconds_count", subscription="hook") >= 3
    assert value(d, "cronbus_circuit_open", subscription="hook") == 0
    assert value(d, "cronbus_deliveries_total", subscription="hook", outcome="failed") == 0

    for where in (urls["api"], api_port, urls["worker"]):
        g = wait_for(
            where,
            lambda s: (
                value(s, "cronbus_queue_depth", queue="parked", state="queued") == 2
                and value(s, "cronbus_subscription_lag_events", subscription="idle") == 3
            ),
            f"the store-wide gauges at {where}",
        )
        assert value(g, "cronbus_queue_depth", queue="later", state="scheduled") == 2
        assert value(g, "cronbus_queue_oldest_age_seconds", queue="parked") > 0
        assert value(g, "cronbus_queue_oldest_age_seconds", queue="later") == 0
        assert value(g, "cronbus_workers", state="alive") == 1
        assert value(g, "cronbus_subscription_lag_events", subscription="hook") == 0
    # Gauges are read off the figures of a few seconds ago, not counted per scrape: the oldest
    # queued run ages between scrapes while its count stays.
    first = value(scrape(urls["api"]), "cronbus_queue_oldest_age_seconds", queue="parked")
    wait_for(
        urls["api"],
        lambda s: value(s, "cronbus_queue_oldest_age_seconds", queue="parked") > first + 0.5,
        "the oldest queued run's age growing",
    )
    for err in roles.stop_all():
        assert "Traceback" not in err, err


def test_server_json_logs_and_both_ports(roles: Roles) -> None:
    """`cronbus server --log-format json`: one JSON object per stderr line, with the run's
    fields on the lines about a run; /metrics on the metrics port and on the API's port."""
    server = roles.start("server", "--api-port", "0", "--metrics-port", "0", "--log-format", "json")
    metrics_url = read_url(server, "cronbus metrics on ")
    api_url = read_url(server, "cronbus API listening on ")

    async def work() -> int:
        async with App(store=roles.url) as app:
            add = app.task(name="add")(lambda a, b: a + b)
            return (await add.defer_async(2, 3)).id

    run_id = asyncio.run(work())
    for url in (metrics_url, f"{api_url}/metrics"):
        wait_for(
            url,
            lambda s: (
                value(s, "cronbus_runs_total", task="add", queue="default", outcome="succeeded")
                == 1
            ),
            f"the run at {url}",
        )
    # The every-second job's first run too, which the log lines are checked for below: on a
    # fast start the deferred run can be done before the job's first fire.
    wait_for(
        metrics_url,
        lambda s: (
            value(s, "cronbus_runs_total", task="metapp.tick", queue="default", outcome="succeeded")
            >= 1
        ),
        "the job's first run",
    )
    (err,) = roles.stop_all()
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert lines, "no log lines"
    for line in lines:
        assert {"time", "level", "role", "logger", "message"} <= line.keys()
        assert line["role"] == "server"
        assert line["time"].endswith("Z")
    ran = [line for line in lines if line.get("action") == "attempt.succeeded"]
    assert {line["task"] for line in ran} == {"add", "metapp.tick"}  # the job fires too
    (added,) = [line for line in ran if line["task"] == "add"]
    assert added | {"run": run_id, "attempt": 1, "queue": "default"} == added
    assert any(line.get("action") == "worker.start" for line in lines)
    # What the task logs itself (in the worker's thread pool) names its run too.
    (own,) = [line for line in lines if line["logger"] == "metapp"]
    assert own["message"] == "adding 2 and 3"
    assert own | {"run": run_id, "attempt": 1, "task": "add", "queue": "default"} == own


@pytest.mark.parametrize(
    ("role", "args", "env", "expected"),
    [
        ("worker", ["--metrics-port", "70000"], {}, "70000 is not in the range 0<=x<=65535"),
        ("scheduler", ["--metrics-port", "-1"], {}, "is not in the range"),
        ("dispatcher", [], {"CRONBUS_METRICS_PORT": "abc"}, "'abc' is not a valid integer"),
        ("api", ["--metrics-port", "0"], {"CRONBUS_METRICS": "0"}, "metrics are switched off"),
        ("server", ["--metrics-port", "0"], {"CRONBUS_METRICS": "x"}, "CRONBUS_METRICS: expected"),
        ("worker", ["--log-format", "xml"], {}, "'xml' is not one of 'text', 'json'"),
        ("api", [], {"CRONBUS_LOG_FORMAT": "yaml"}, "'yaml' is not one of 'text', 'json'"),
    ],
)
def test_bad_observability_options(
    roles: Roles, role: str, args: list[str], env: dict[str, str], expected: str
) -> None:
    """A bad port, switched-off metrics or an unknown log format: refused at the edge (each
    case on one role; every role command takes the same options from one decorator)."""
    roles.env.update(env)
    process = roles.start(role, *args)
    _, err = process.communicate(timeout=DEADLINE)
    assert process.returncode != 0, err
    assert expected in err, err
    assert "Traceback" not in err


def test_metrics_port_in_use(roles: Roles) -> None:
    """A metrics port in use: one clear line, exit 1, no role started."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for role in ("worker", "scheduler", "dispatcher", "server", "api"):
            process = roles.start(role, "--metrics-port", port)
            _, err = process.communicate(timeout=DEADLINE)
            assert process.returncode == 1, (role, err)
            assert f"--metrics-port: cannot serve metrics on 127.0.0.1:{port}:" in err, err
            assert "in use" in err, err
            assert "Traceback" not in err
            assert "started" not in err
