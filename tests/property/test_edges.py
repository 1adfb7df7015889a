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
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.pg import pg_store_url
from cronbus import App, Call
from cronbus.errors import CronbusError
from cronbus.events.event import make_event

from .commands import check_listings, check_result, cli_args, invoke
from .conftest import profile
from .values import ARITY, GOOD, Fields, texts

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
        args = [draw(f"arg {i}", "payload") for i in range(data.draw(ARITY, label="arity"))]
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
