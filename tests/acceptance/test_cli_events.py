"""Acceptance: ``cronbus events``, ``cronbus subs`` and the delivery half of ``cronbus dlq``, run as
real subprocesses on an SQLite file, and the main round trips on a PostgreSQL schema too.

Starting the command line costs about half a second, so each test batches its checks per
subprocess, seeds what it only reads through the Python API, and the error cases all start at
once.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from acceptance.together import finish_all
from contract.pg import pg_store_url
from cronbus import App, ErrorInfo
from cronbus.events.records import DeliveryOutcome, DeliveryResult, NewDelivery
from cronbus.model import ClaimRequest, Outcome, QueueShare
from cronbus.states import AttemptOutcome

DEADLINE_SECONDS = 30.0
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
APP_SOURCE = """
from cronbus import App

app = App()


@app.task(name="ship")
def ship(event) -> None:
    pass
"""


def _interruptible() -> None:
    """In the child: Ctrl-C as a terminal sends it, even when the test run was started in the
    background, where SIGINT arrives ignored and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass(frozen=True)
class Cli:
    """The command line, run in one test's folder against one store."""

    cwd: Path
    url: str
    env: dict[str, str]

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cronbus", *args, "--store", self.url]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``cronbus ARGS --store URL`` to the end."""
        return subprocess.run(
            self.command(*args),
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """Run the command, check that it succeeded quietly, and return its stdout."""
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", done.stderr
        return done.stdout

    def json(self, *args: str, stdin: str | None = None) -> Any:
        """Run the command with ``--json`` and parse its one document."""
        return json.loads(self.ok(*args, "--json", stdin=stdin))

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        """Start the command without waiting for it."""
        return subprocess.Popen(
            self.command(*args),
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_interruptible,
        )


def _cli(tmp_path: Path, url: str) -> Cli:
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    return Cli(tmp_path, url, env)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The command line on a fresh SQLite file."""
    return _cli(tmp_path, f"sqlite:///{tmp_path / 't.db'}")


@pytest.fixture(params=["sqlite", "postgres"])
async def any_cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    """The command line on a fresh SQLite file, or on a new PostgreSQL schema (never skipped
    in CI, where ``CI=true`` turns an unreachable server into a failure)."""
    if request.param == "postgres":
        return _cli(tmp_path, await pg_store_url(request))
    return _cli(tmp_path, f"sqlite:///{tmp_path / 't.db'}")


# -- seeding through the Python API --------------------------------------------------------------
async def publish(url: str, topic: str, count: int) -> None:
    """Publish ``count`` events ``order.created`` with data ``{"n": i}`` (i from 1)."""
    async with App(store=url) as app:
        for n in range(1, count + 1):
            await app.publish_async(topic, "order.created", {"n": n})


async def dead_deliveries(url: str, name: str, count: int) -> list[int]:
    """Give subscription ``name`` (of topic ``orders``, from its start) ``count`` dead
    deliveries, the way a dispatcher would: record them, take them, fail them for good."""
    async with App(store=url) as app:
        store: Any = app.store
        now = app.clock.now()
        await app.subscriptions.add(name, topic="orders", task="ship", start="earliest")
        (lease,) = await store.acquire_subscriptions("d1", now, 30.0, 10)
        events = await app.events.read("orders", after=0, limit=count)
        new = [NewDelivery(offset=e.offset, event_id=e.id, key=None) for e in events]
        assert await store.advance(lease, events[-1].offset, new, now)
        taken = await store.take_deliveries(lease, now, count, 0)
        failures = [
            DeliveryResult(
                delivery_id=d.id,
                outcome=DeliveryOutcome.FAILED,
                started_at=now,
                finished_at=now + 0.25,
                status=500,
                error="upstream said no",
                retry_at=None,
            )
            for d in taken
        ]
        assert await store.finish_deliveries(lease, failures, now) == [True] * count
        await store.release_subscriptions("d1", [name])
        return [d.id for d in taken]


async def dead_run(url: str) -> int:
    """One dead run, failed by a worker that claimed it."""
    app = App(store=url)
    app.task(name="add")(_add)
    async with app:
        run_id = (await app.get_task("add").defer_async(1, 2)).id
        request = ClaimRequest(
            worker_id="w1", queues=[QueueShare(name="default", limit=1)], limit=1, lease_seconds=30
        )
        (claimed,) = await app.store.claim(request, app.clock.now())
        failure = Outcome(
            run_id=run_id,
            attempt_id=claimed.attempt_id,
            outcome=AttemptOutcome.FAILED,
            error=ErrorInfo(type="ValueError", message="card declined"),
        )
        assert await app.store.complete([failure], app.clock.now()) == [True]
        return run_id


def _add(a: int, b: int) -> int:
    return a + b


def lines(text: str) -> list[Any]:
    """JSON lines, parsed."""
    return [json.loads(line) for line in text.splitlines()]


# -- events --------------------------------------------------------------------------------------
def test_publish_then_tail_shows_the_events_in_order(any_cli: Cli) -> None:
    cli = any_cli
    first = cli.json("events", "publish", "orders", "--type", "order.created", "--data", '{"n": 1}')
    assert (first["topic"], first["offset"], first["created"]) == ("orders", 1, True)
    args = ("events", "publish", "orders", "--type", "order.paid", "--id", "pay-7", "--data", "-")
    second = cli.json(*args, "--subject", "orders/7", "--key", "k7", stdin='{"n": 2}')
    assert cli.json(*args, stdin='{"n": 2}') == {**second, "created": False}  # idempotent
    assert cli.ok("events", "publish", "orders", "--type", "order.shipped").startswith("published ")

    tailed = lines(cli.ok("events", "tail", "orders", "--from", "1", "--json"))

    assert [(e["offset"], e["type"], e.get("data")) for e in tailed] == [
        (1, "order.created", {"n": 1}),
        (2, "order.paid", {"n": 2}),
        (3, "order.shipped", None),
    ]
    assert (tailed[1]["id"], tailed[1]["subject"], tailed[1]["partitionkey"]) == (
        "pay-7",
        "orders/7",
        "k7",
    )
    assert all(e["specversion"] == "1.0" and e["topic"] == "orders" for e in tailed)
    text = cli.ok("events", "tail", "orders", "--last", "2").splitlines()
    assert [line.split()[0] for line in text] == ["2", "3"]
    assert all(part in text[0] for part in ("pay-7", "orders/7", '{"n": 2}'))
    (topic,) = cli.json("events", "topics")
    assert topic == {
        "name": "orders",
        "first_offset": 1,
        "last_offset": 3,
        "events": 3,
        "max_age": None,
        "max_events": None,
    }


async def test_tail_follow_prints_new_events_until_ctrl_c(cli: Cli) -> None:
    await publish(cli.url, "orders", 1)
    follower = cli.spawn("events", "tail", "orders", "--follow", "--json")
    limited = cli.spawn("events", "tail", "orders", "--follow", "--json", "--limit", "2")
    try:
        assert follower.stdout is not None
        assert json.loads(follower.stdout.readline())["offset"] == 1  # it reads, then waits
        await publish(cli.url, "orders", 1)
        assert json.loads(follower.stdout.readline())["offset"] == 2
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=DEADLINE_SECONDS)
        assert (follower.returncode, out, err) == (0, "", "")

        out, err = limited.communicate(timeout=DEADLINE_SECONDS)  # --limit 2 ends it
        assert (limited.returncode, err) == (0, "")
        assert [e["offset"] for e in lines(out)] == [1, 2]
    finally:
        for process in (follower, limited):
            if process.poll() is None:
                process.kill()
            process.communicate()  # reaps it and closes its pipes


async def test_retention_changes_only_the_limits_given(cli: Cli) -> None:
    await publish(cli.url, "orders", 1)
    assert cli.ok("events", "retention", "orders").strip() == "orders: keeps every event"
    set_age = cli.json("events", "retention", "orders", "--max-age", "3600")
    assert (set_age["max_age"], set_age["max_events"]) == (3600, None)
    both = cli.json("events", "retention", "orders", "--max-events", "500")
    assert (both["max_age"], both["max_events"]) == (3600, 500)
    cleared = cli.ok("events", "retention", "orders", "--max-age", "none")
    assert cleared.strip() == "orders: keeps the newest 500 events"


# -- subscriptions -------------------------------------------------------------------------------
async def test_subscription_round_trip(any_cli: Cli) -> None:
    cli = any_cli
    await publish(cli.url, "orders", 3)
    hook = cli.json(
        *("subs", "add", "hook", "--topic", "orders", "--webhook", "https://example.com/in"),
        *("--types", "order.*,invoice.paid", "--types", "refund.*", "--secret", SECRET),
        *("--header", "X-Team: billing", "--max-attempts", "3", "--timeout", "2.5", "--ordered"),
    )
    assert hook["target"] == {
        "kind": "webhook",
        "url": "https://example.com/in",
        "headers": {"X-Team": "***"},  # values masked (test_cli_subs_masking.py)
        "secret_count": 1,
    }
    assert SECRET not in json.dumps(hook)
    assert hook["filter"] == {"types": ["order.*", "invoice.paid", "refund.*"]}
    policy = hook["policy"]
    assert (policy["max_attempts"], policy["timeout"], policy["ordered"]) == (3, 2.5, True)
    assert (hook["state"], hook["cursor"], hook["lag"], hook["start"]) == ("active", 3, 0, "latest")
    big = '{"data": {"n": [{"numeric": [">", 1]}]}}'
    task = cli.json(
        *("subs", "add", "big", "--topic", "orders", "--task", "ship", "--queue", "bulk"),
        *("--filter", big, "--start", "earliest", "--app", "myapp"),
    )
    assert (task["target"], task["cursor"], task["lag"]) == (
        {"kind": "task", "task": "ship", "queue": "bulk"},
        0,
        3,
    )

    cli.ok("subs", "pause", "hook")
    listed = cli.json("subs", "list")
    assert [(s["name"], s["state"], s["lag"]) for s in listed] == [
        ("big", "active", 3),
        ("hook", "paused", 0),
    ]
    table = cli.ok("subs", "list", "--topic", "orders")
    assert all(part in table for part in ("example.com/in", "types=order.*", "paused"))
    assert cli.ok("subs", "resume", "hook").strip() == "subscription hook: active"

    replayed = cli.json("subs", "replay", "hook", "--from", "2")
    assert (replayed["previous_cursor"], replayed["cursor"], replayed["lag"]) == (3, 1, 2)
    assert cli.json("subs", "replay", "hook", "--from", "2000-01-01T00:00:00Z")["cursor"] == 0
    future = datetime(2999, 1, 1, tzinfo=UTC).timestamp()
    assert cli.json("subs", "replay", "hook", "--from", f"@{future:.0f}")["cursor"] == 3

    shown = cli.json("subs", "show", "hook")
    assert shown["deliveries"] == {"pending": 0, "in_flight": 0, "acked": 0, "retry": 0, "dead": 0}
    assert "X-Team: ***" in cli.ok("subs", "show", "hook")
    assert cli.ok("subs", "delete", "big", "--yes").strip() == "subscription big deleted"
    assert [s["name"] for s in cli.json("subs", "list")] == ["hook"]


async def test_deliveries_attempts_and_the_dead_letter_queue(cli: Cli) -> None:
    await publish(cli.url, "orders", 3)
    first, second, _ = await dead_deliveries(cli.url, "ship-orders", 3)
    run_id = await dead_run(cli.url)

    dead = cli.json("subs", "deliveries", "ship-orders", "--state", "dead,retry")
    assert [(d["offset"], d["state"], d["attempts"], d["last_status"]) for d in dead] == [
        (3, "dead", 1, 500),
        (2, "dead", 1, 500),
        (1, "dead", 1, 500),
    ]
    assert cli.json("subs", "deliveries", "ship-orders", "--state", "acked") == []
    (attempt,) = cli.json("subs", "attempts", str(first))
    assert (attempt["number"], attempt["outcome"], attempt["status"]) == (1, "failed", 500)
    assert (attempt["error"], attempt["duration"]) == ("upstream said no", 0.25)
    assert "upstream said no" in cli.ok("subs", "attempts", str(first))

    letters = cli.json("dlq", "list")
    assert sorted((d["kind"], d["id"]) for d in letters) == [
        ("delivery", first),
        ("delivery", second),
        ("delivery", first + 2),
        ("run", run_id),
    ]
    table = cli.ok("dlq", "list")
    assert all(part in table for part in ("card declined", "upstream said no", "HTTP 500"))
    assert [d["kind"] for d in cli.json("dlq", "list", "--kind", "runs")] == ["run"]
    assert len(cli.json("dlq", "list", "--subscription", "ship-orders")) == 3

    assert cli.json("dlq", "requeue", "--deliveries", str(first)) == {
        "requeued": [first],
        "count": 1,
        "refused": [],
    }
    refused = cli.run("dlq", "requeue", "--deliveries", str(first), str(second))
    assert refused.returncode == 1
    assert refused.stdout.strip() == "requeued 1 delivery"
    assert refused.stderr == f"error: not requeued: delivery {first} is pending, not dead\n"
    everything = cli.ok("dlq", "requeue", "--all-deliveries", "--subscription", "ship-orders")
    assert everything.strip() == "requeued 1 delivery"
    states = cli.json("subs", "show", "ship-orders")["deliveries"]
    assert (states["pending"], states["dead"]) == (3, 0)
    assert [d["kind"] for d in cli.json("dlq", "list")] == ["run"]


# -- bad input -----------------------------------------------------------------------------------
ADD = ("subs", "add", "new", "--topic", "orders")
BAD_INPUT: dict[str, tuple[tuple[str, ...], str]] = {
    "data not JSON": (
        ("events", "publish", "orders", "--type", "t", "--data", "{nope"),
        "'--data': '{nope' is not JSON",
    ),
    "tail from and last": (("events", "tail", "orders", "--from", "1", "--last", "2"), "not both"),
    "bad retention": (("events", "retention", "orders", "--max-age", "-1"), "'--max-age'"),
    "unknown subscription": (("subs", "show", "nope"), "no subscription named 'nope'"),
    "deliveries of unknown": (("subs", "deliveries", "nope"), "no subscription named 'nope'"),
    "unknown delivery": (("subs", "attempts", "99"), "no delivery has id 99"),
    "filter not JSON": ((*ADD, "--task", "ship", "--filter", "{"), "'--filter': '{' is not JSON"),
    "bad filter": (
        (*ADD, "--task", "ship", "--filter", '{"data": {"n": [{"between": [1, 2]}]}}'),
        "filter.data.n[0]: unknown operator 'between'",
    ),
    "bad URL": ((*ADD, "--webhook", "ftp://example.com"), "is not an http(s) URL with a host"),
    "no target": (ADD, "give a target: --webhook URL or --task NAME"),
    "two targets": ((*ADD, "--task", "ship", "--webhook", "https://a.b"), "not both"),
    "secret for a task": ((*ADD, "--task", "ship", "--secret", SECRET), "go with --webhook"),
    "bad secret": ((*ADD, "--webhook", "https://a.b", "--secret", "s3cret"), "whsec_"),
    "bad header": ((*ADD, "--webhook", "https://a.b", "--header", "X-A"), "is not a header"),
    "unknown task": ((*ADD, "--task", "nope", "--app", "myapp"), "no task named 'nope'"),
    "name taken": (
        ("subs", "add", "hook", "--topic", "orders", "--task", "ship", "--max-attempts", "3"),
        "--replace",
    ),
    "bad state": (("subs", "deliveries", "hook", "--state", "done"), "unknown state 'done'"),
    "bad --from": (("subs", "replay", "hook", "--from", "yesterday"), "is not an offset"),
    "offset 0": (("subs", "replay", "hook", "--from", "0"), "offset must be >= 1"),
    "delete without --yes": (("subs", "delete", "hook"), "without --yes"),
    "deliveries without ids": (("dlq", "requeue", "--deliveries"), "needs delivery ids"),
    "kind and filter": (("dlq", "list", "--kind", "runs", "--subscription", "hook"), "--kind"),
}


async def test_bad_input_is_one_line_and_changes_nothing(cli: Cli) -> None:
    await publish(cli.url, "orders", 2)
    cli.ok("subs", "add", "hook", "--topic", "orders", "--task", "ship")
    cli.ok("subs", "add", "hook", "--topic", "orders", "--task", "ship")  # the same again: no-op
    before = cli.ok("subs", "list", "--json"), cli.ok("events", "topics", "--json")
    starters = {name: functools.partial(cli.spawn, *argv) for name, (argv, _) in BAD_INPUT.items()}
    wrong = []
    for name, done in finish_all(starters, DEADLINE_SECONDS).items():
        out, err, status = done.stdout, done.stderr, done.returncode
        message = BAD_INPUT[name][1]
        one_line = err.startswith("error: ") and err.count("\n") == 1
        if status != 1 or out or not one_line or message not in err:
            wrong.append(f"{name}: status {status}, stdout {out!r}, stderr {err!r}")
    assert not wrong, "\n".join(wrong)
    assert (cli.ok("subs", "list", "--json"), cli.ok("events", "topics", "--json")) == before
