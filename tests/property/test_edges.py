"""Property: whatever a user gives cronbus, from Python or on the command line, each call either
succeeds or is refused with one of cronbus's own errors (the command line: one ``error:`` line,
status 1), and afterwards every list and show command of that store still works.

Hypothesis generates arguments, names, times, intervals, payloads and event attributes, mixing
ordinary values with the ones seen breaking cronbus (NUL, lone surrogates, 1e300, NaN, huge
texts, non-string keys, reserved topics). Each test works on one real store, SQLite always and
PostgreSQL with fewer examples; the command line runs in-process through Click's runner.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from contract.pg import pg_store_url
from cronbus import App, Call
from cronbus.cli import cronbus as cli
from cronbus.errors import CronbusError
from cronbus.events.event import make_event

from .conftest import profile

PG_SCALE = 0.3
"""PostgreSQL runs this share of the examples: each CLI call there opens a connection pool."""
APP_SOURCE = """
from cronbus import App

app = App()


@app.task(name="add")
def add(a, b=0):
    return a


@app.task(name="anything")
def anything(*args, **kwargs):
    return None


@app.job(every=60, name="tick")
def tick():
    pass
"""

# -- values: each field is drawn good, or now and then wild ------------------------------------
SEEN = [
    "",
    " ",
    "a b",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udcff",
    "\n",
    "cronbus.runs",
    "cronbus.x",
    "x" * 300,
    "k" * 1000,
    "-",
    "--help",
    "order.created",
    "https://example.com/a?b#c",
    "urn:shop:orders",
    "1x:y",
    "é",
    "0 0 12 ? * 6#3",
    "0 5-5 * * *",
    "2026-05-01T12:00:00+02:00",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00",
]
texts = st.one_of(
    st.sampled_from(SEEN),
    st.text(max_size=20),
    st.text(st.characters(exclude_categories=()), max_size=8),  # surrogates included
)
numbers = st.one_of(
    st.sampled_from([0, -1, 1e-9, 1e12, 1e300, -1e300, 1e308, 253_402_300_800, 2**63, 10**30]),
    st.integers(),
    st.floats(),
)
wild_scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
wild_payloads = st.recursive(
    wild_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(texts, inner, max_size=4),
        st.dictionaries(st.one_of(st.integers(), st.none(), st.booleans()), inner, max_size=2),
    ),
    max_leaves=12,
) | st.sampled_from([{1, 2}, b"bytes", object(), [[[[[[]]]]]], "x" * 2_000_000])

GOOD_TEXT = st.text(st.characters(categories=["L", "N", "P", "S"]) | st.just(" "), max_size=12)
GOOD = {
    "name": st.from_regex(r"[a-z][a-z0-9_.-]{0,11}", fullmatch=True),
    "text": GOOD_TEXT.filter(bool),
    "type": st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,8}){0,2}", fullmatch=True),
    "source": st.sampled_from(["cronbus", "/orders", "https://x.example/y?z=1", "urn:a:b"]),
    "id": st.from_regex(r"[A-Za-z0-9-]{1,20}", fullmatch=True),
    "seconds": st.floats(0.001, 1e6) | st.integers(1, 10**6),
    "time": st.floats(0, 4e9)
    | st.datetimes(datetime(1970, 1, 2), datetime(9999, 12, 30), timezones=st.just(UTC)),
    "priority": st.integers(-1000, 1000),
    "payload": st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | GOOD_TEXT,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(GOOD_TEXT, inner, max_size=3),
        max_leaves=8,
    ),
    "cron": st.sampled_from(["* * * * *", "0 9 * * MON-FRI", "*/5 * * * * *", "0 0 1 1 *"]),
    "at": st.sampled_from(["2099-05-01T12:00:00+02:00", "9999-01-01T00:00:00Z"]),
}
WILD = {
    "name": texts,
    "text": texts,
    "type": texts,
    "source": texts,
    "id": texts,
    "seconds": st.one_of(numbers, st.timedeltas(), texts),
    "time": st.one_of(
        numbers,
        st.datetimes(timezones=st.none() | st.just(UTC) | st.just(timezone(timedelta(hours=-14)))),
        texts,
    ),
    "priority": st.one_of(numbers, texts),
    "payload": wild_payloads,
    "cron": texts,
    "at": st.one_of(texts, numbers),
}
WILD_ODDS = 5
"""One field in this many is drawn wild: a call usually has one odd value among good ones, so
both acceptance and each refusal are exercised."""


_ARITY = st.sampled_from((1, 2, 1, 2, 0, 3))
_WILD_CHOICE = st.sampled_from((False,) * (WILD_ODDS - 1) + (True,))


class Fields:
    """Draws the fields of one call: each good, or (one in :data:`WILD_ODDS`) wild."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def __call__(self, field: str, kind: str) -> Any:
        # Good shrinks first (index 0): a failure shrinks to its one wild field.
        wild = self.data.draw(_WILD_CHOICE, label=f"{field} wild?")
        return self.data.draw(WILD[kind] if wild else GOOD[kind], label=field)

    def some(self, **fields: str) -> dict[str, Any]:
        """Each of ``fields`` (name -> kind) given or left out."""
        chosen = {}
        for field, kind in fields.items():
            if self.data.draw(st.booleans(), label=f"give {field}"):
                chosen[field] = self(field, kind)
        return chosen

    def pick(self, *choices: str) -> str:
        return self.data.draw(st.sampled_from(choices))

    def list(self, kind: str, most: int) -> list[Any]:
        count = self.data.draw(st.integers(0, most), label=f"{kind} count")
        return [self(f"{kind}[{i}]", kind) for i in range(count)]


# -- the Python API ------------------------------------------------------------------------------
def api_calls(app: App, data: st.DataObject) -> tuple[str, Callable[[], Any]]:
    """One call of the public API with generated values, named for the report."""
    add, anything = app.tasks["add"], app.tasks["anything"]
    draw = Fields(data)
    kind = draw.pick(
        "defer", "defer_add", "defer_many", "publish", "job", "job_update", "subscribe", "other"
    )
    if kind == "other":
        return other_call(app, draw, data)
    options = draw.some(
        delay="seconds", eta="time", priority="priority", queue="name", idempotency_key="text"
    )
    if "delay" in options and "eta" in options and data.draw(st.booleans()):
        del options["eta"]  # both together are refused: keep that case, but not always
    if kind == "defer":
        args = draw.list("payload", 3)
        kwargs = {draw("kwarg name", "text"): draw("kwarg", "payload") for _ in range(2)}
        return kind, lambda: anything.using(**options).defer(*args, **kwargs)
    if kind == "defer_add":
        args = [draw(f"arg {i}", "payload") for i in range(data.draw(_ARITY, label="arity"))]
        return kind, lambda: add.using(**options).defer(*args)
    if kind == "defer_many":
        calls: list[Any] = []
        for _ in range(data.draw(st.integers(0, 3))):
            shape = draw.pick("list", "dict", "call", "odd")
            if shape == "list":
                calls.append(draw.list("payload", 2))
            elif shape == "dict":
                calls.append({draw("kwarg name", "text"): draw("kwarg", "payload")})
            elif shape == "call":
                key = draw.some(idempotency_key="text")
                calls.append(Call.of(draw("arg", "payload"), **key))
            else:
                calls.append(draw("odd call", "payload"))
        options.pop("idempotency_key", None)
        return kind, lambda: anything.defer_many(calls, **options)
    if kind == "publish":
        topic = data.draw(st.just("t") | GOOD["name"] | texts, label="topic")
        attributes = draw.some(source="source", subject="text", id="id", key="text", time="time")
        type_, body = draw("type", "type"), draw("data", "payload")
        return kind, lambda: app.publish(topic, type_, body, **attributes)
    if kind in ("job", "job_update"):
        trigger_kind = draw.pick("every", "after", "at", "cron")
        value = draw(
            trigger_kind, {"every": "seconds", "after": "seconds"}.get(trigger_kind, trigger_kind)
        )
        trigger: dict[str, Any] = {trigger_kind: value}
        if trigger_kind == "cron" and data.draw(st.booleans()):
            trigger["tz"] = data.draw(st.sampled_from(["Europe/Paris", "UTC"]) | texts)
        extra = draw.some(
            jitter="seconds", misfire_grace="seconds", queue="name", priority="priority"
        )
        if kind == "job_update":
            force = data.draw(st.booleans(), label="force")
            target = data.draw(st.sampled_from(["tick", "j1", "j1"]) | texts, label="job")
            if target != "tick":  # the code job's function takes no arguments
                extra["args"] = draw.list("payload", 2)
            return kind, lambda: app.blocking(
                app.jobs.update(target, force=force, **trigger, **extra)
            )
        extra["args"] = draw.list("payload", 2)
        name = draw("job name", "name")
        return kind, lambda: app.blocking(app.jobs.add(name, "anything", **trigger, **extra))
    name = draw("subscription name", "name")
    topic = data.draw(st.just("t") | GOOD["name"] | texts, label="topic")
    filters = draw.some(subject="text", source="source")
    if data.draw(st.booleans()):
        filters["types"] = [draw("type pattern", "type")]
    return kind, lambda: app.blocking(
        app.subscriptions.add(name, topic=topic, task="anything", **filters)
    )


def other_call(app: App, draw: Fields, data: st.DataObject) -> tuple[str, Callable[[], Any]]:
    """One of the API's other calls (read, pause, remove, replay...) with generated values."""
    name = data.draw(st.sampled_from(["tick", "j1", "t", "s"]) | texts, label="name")
    number = draw("number", "priority")
    seconds = draw("seconds", "seconds")
    run = app.blocking
    calls: dict[str, Callable[[], Any]] = {
        "publish_many": lambda: app.publish_many(
            name, [make_event(draw("type", "type"), draw("data", "payload"))]
        ),
        "read": lambda: run(app.events.read(name, after=number, limit=10)),
        "retention": lambda: run(app.events.set_retention(name, max_age=seconds)),
        "jobs.next": lambda: run(app.jobs.next(name, number)),
        "jobs.pause": lambda: run(app.jobs.pause(name)),
        "jobs.resume": lambda: run(app.jobs.resume(name)),
        "jobs.remove": lambda: run(app.jobs.remove(name, force=data.draw(st.booleans()))),
        "jobs.trigger": lambda: run(app.jobs.trigger(name)),
        "subs.replay": lambda: run(app.subscriptions.replay(name, offset=number)),
        "subs.replay since": lambda: run(app.subscriptions.replay(name, since=seconds)),
        "subs.update": lambda: run(app.subscriptions.update(name, max_in_flight=number)),
        "subs.deliveries": lambda: run(app.subscriptions.deliveries(name, limit=number)),
        "subs.pause": lambda: run(app.subscriptions.pause(name)),
    }
    chosen = draw.pick(*calls)
    return chosen, calls[chosen]


def check_error(error: CronbusError) -> None:
    """A refusal is one short line."""
    message = str(error)
    assert message, type(error)
    assert len(message) <= 1000, message


# -- the command line ----------------------------------------------------------------------------
def json_text(draw: Fields, kind: str) -> str:
    """JSON a user might type: an encoded value (NaN, stringified keys...) or any text."""
    if draw.pick("json", "text") == "text":
        return str(draw("json text", "text"))
    if kind == "list":
        return _dumps(draw.list("payload", 3))
    if kind == "dict":
        return _dumps({draw("key", "text"): draw("value", "payload") for _ in range(2)})
    return _dumps(draw("json", "payload"))


def _dumps(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def text_of(value: object) -> str:
    """A generated value as the text a user would type for it."""
    if isinstance(value, datetime):
        return value.isoformat()
    return value if isinstance(value, str) else repr(value)


def cli_args(module: str, data: st.DataObject) -> list[str]:
    """One command line a user might type, with generated values."""
    draw = Fields(data)

    def option(flag: str, kind: str) -> list[str]:
        """``[FLAG, VALUE]`` or nothing: each option is given or left out."""
        if not data.draw(st.booleans(), label=f"give {flag}"):
            return []
        return [flag, text_of(draw(flag, kind))]

    command = draw.pick("defer", "publish", "job", "job_change", "subscribe", "inspect")
    if command == "inspect":
        return inspect_args(draw, data)
    if command == "defer":
        return [
            "defer",
            draw.pick("add", "anything"),
            "--app",
            module,
            "--args",
            json_text(draw, "list"),
            *(["--kwargs", json_text(draw, "dict")] if data.draw(st.booleans()) else []),
            *option("--delay", "seconds"),
            *option("--priority", "priority"),
            *option("--queue", "name"),
            *option("--idempotency-key", "text"),
        ]
    if command == "publish":
        return [
            "events",
            "publish",
            data.draw(st.just("t") | GOOD["name"] | texts, label="topic"),
            "--type",
            text_of(draw("--type", "type")),
            *(["--data", json_text(draw, "any")] if data.draw(st.booleans()) else []),
            *option("--source", "source"),
            *option("--subject", "text"),
            *option("--id", "id"),
            *option("--key", "text"),
        ]
    if command in ("job", "job_change"):
        trigger = draw.pick("every", "after", "cron", "at")
        kind = {"every": "seconds", "after": "seconds"}.get(trigger, trigger)
        schedule = [f"--{trigger}", text_of(draw(trigger, kind))]
        if command == "job_change":
            name = data.draw(st.sampled_from(["tick", "j1"]) | texts, label="job")
            if data.draw(st.booleans(), label="remove"):
                force = ["--force"] if data.draw(st.booleans(), label="--force") else []
                return ["jobs", "remove", name, *force]
            return ["jobs", "update", name, "--app", module, *schedule, "--force"]
        return [
            "jobs",
            "add",
            text_of(draw("job name", "name")),
            "--app",
            module,
            "--task",
            "anything",
            *schedule,
            *(["--args", json_text(draw, "list")] if data.draw(st.booleans()) else []),
            *option("--jitter", "seconds"),
            *option("--priority", "priority"),
        ]
    return [
        "subs",
        "add",
        text_of(draw("subscription name", "name")),
        "--topic",
        data.draw(st.just("t") | GOOD["name"] | texts, label="--topic"),
        "--task",
        "anything",
        *option("--types", "type"),
        *option("--subject", "text"),
    ]


def inspect_args(draw: Fields, data: st.DataObject) -> list[str]:
    """A command that reads or changes one thing named by a typed value."""
    ident = data.draw(
        st.sampled_from(["1", "2", "0", "-1", "9223372036854775807", "99999999999999999999"])
        | texts
    )
    name = data.draw(st.sampled_from(["tick", "j1", "t"]) | texts, label="name")
    number = text_of(draw("number", "seconds"))
    return data.draw(
        st.sampled_from(
            [
                ["runs", "show", ident],
                ["runs", "cancel", ident],
                ["runs", "retry", ident],
                ["runs", "list", "--task", name, "--queue", name, "--limit", ident],
                ["runs", "list", "--state", name, "--before", ident],
                ["jobs", "show", name],
                ["jobs", "next", name, "-n", ident],
                ["jobs", "pause", name],
                ["jobs", "resume", name],
                ["jobs", "trigger", name, "--app", "x"],
                ["events", "tail", name, "--from", ident],
                ["events", "tail", name, "--last", ident, "--json"],
                ["events", "retention", name, "--max-age", number],
                ["subs", "show", name],
                ["subs", "replay", name, "--from", ident],
                ["subs", "deliveries", name, "--limit", ident],
                ["dlq", "list", "--limit", ident],
                ["workers", "list", "--state", name],
            ]
        ),
        label="inspect",
    )


def invoke(args: list[str], store: str) -> Result:
    """Run ``cronbus ARGS --store STORE`` in-process."""
    return CliRunner().invoke(cli, [*args, "--store", store], catch_exceptions=True)


def check_result(result: Result, args: list[str]) -> bool:
    """Success, or one ``error:`` line with status 1 and no traceback; True on success."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"cronbus {args!r} raised {result.exception!r}") from (
            result.exception
        )
    if result.exit_code == 0:
        return True
    lines = result.stderr.splitlines()
    assert result.exit_code == 1, (args, result.exit_code, result.stderr)
    assert len(lines) == 1, (args, result.stderr)
    assert lines[0].startswith("error: "), (args, result.stderr)
    return False


# -- afterwards: every list and show command -----------------------------------------------------
def check_listings(store: str, module: str) -> int:
    """Run every list and show command of the store; all must succeed. Returns how many ran."""
    every = ["--limit", "1000000"]  # the whole store, not the newest page
    commands: list[list[str]] = [
        ["runs", "list", *every],
        ["runs", "list", "--json", *every],
        ["jobs", "list"],
        ["jobs", "list", "--json"],
        ["events", "topics"],
        ["subs", "list"],
        ["subs", "list", "--json"],
        ["dlq", "list", *every],
        ["workers", "list"],
    ]
    runs = json.loads(invoke(["runs", "list", "--json", *every], store).stdout)
    shown = runs[:20] + runs[20:][-20:]  # the newest and the oldest: show costs a call each
    commands += [["runs", "show", str(run["id"])] for run in shown]
    commands += [["runs", "show", str(run["id"]), "--json"] for run in shown]
    jobs = json.loads(invoke(["jobs", "list", "--json"], store).stdout)
    commands += [["jobs", "show", job["name"]] for job in jobs]
    commands += [["jobs", "next", job["name"]] for job in jobs]
    topics = json.loads(invoke(["events", "topics", "--json"], store).stdout)
    for topic in topics:
        name = topic["name"]
        whole = ["--from", "1"]
        commands += [["events", "tail", name, *whole], ["events", "tail", name, "--json", *whole]]
    subs = json.loads(invoke(["subs", "list", "--json"], store).stdout)
    commands += [["subs", "show", sub["name"]] for sub in subs]
    for args in commands:
        result = invoke(args, store)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.exception,
        )
        assert result.exit_code == 0, (args, result.stderr)
    assert runs or jobs, "the generated calls stored nothing: the test proves too little"
    return len(commands)


# -- fixtures and tests --------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each kind."""
    if request.param == "postgres":
        return asyncio.run(pg_store_url(request))
    return f"sqlite:///{tmp_path / 'edges.db'}"


@pytest.fixture
def module(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """An importable app module (tasks ``add`` and ``anything``, code job ``tick``)."""
    name = f"edges_{request.node.callspec.id.replace('-', '_')}_{id(tmp_path)}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE)
    sys.path.insert(0, str(tmp_path))
    try:
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def load(module: str, store: str) -> App:
    """The module's app, on ``store``."""
    app: App = __import__(module).app
    app.use_store(store)
    return app


def scale(store: str) -> float:
    return PG_SCALE if store.startswith("postgresql") else 1.0


def test_the_python_api_succeeds_or_raises_a_cronbus_error(
    store: str, module: str, examples: Counter[str]
) -> None:
    app = load(module, store)
    outcomes: Counter[str] = Counter()
    with app:
        app.blocking(app.jobs.sync())
        app.blocking(app.jobs.add("j1", "anything", every=60))

        @profile(scale(store))
        @given(data=st.data())
        def call_once(data: st.DataObject) -> None:
            kind, call = api_calls(app, data)
            try:
                call()
            except CronbusError as error:
                check_error(error)
                outcomes[f"{kind} refused"] += 1
            else:
                outcomes[f"{kind} ok"] += 1
            examples[f"python api [{store.split(':')[0]}]"] += 1

        call_once()
    assert any(k.endswith(" ok") for k in outcomes), outcomes
    assert any(k.endswith(" refused") for k in outcomes), outcomes
    check_listings(store, module)


def test_the_command_line_succeeds_or_prints_one_error_line(
    store: str, module: str, examples: Counter[str]
) -> None:
    app = load(module, store)
    with app:
        app.blocking(app.jobs.sync())
        app.blocking(app.jobs.add("j1", "anything", every=60))
        app.tasks["anything"].defer(1)  # something to list even if every command is refused
    outcomes: Counter[bool] = Counter()

    @profile(scale(store) * 0.5)
    @given(data=st.data())
    def run_once(data: st.DataObject) -> None:
        args = cli_args(module, data)
        outcomes[check_result(invoke(args, store), args)] += 1
        examples[f"command line [{store.split(':')[0]}]"] += 1

    run_once()
    assert outcomes[True], outcomes
    assert outcomes[False], outcomes
    check_listings(store, module)
