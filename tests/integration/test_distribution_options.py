"""Task options of distribution (routes, limits, fan-out, the run context) are refused at the
edge with errors that name the task and the option, and shape the runs a defer stores."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cronbus import App, ConfigurationError, InvalidArgumentError, RunState
from cronbus.config import Settings
from cronbus.model import FanOutKind, NewRun, RunFilter


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[App]:
    """A fresh app on its own SQLite file."""
    app = App(f"sqlite:///{tmp_path / 'options.db'}", settings=Settings(), namespace="shop")
    async with app:
        yield app


def define(app: App, **options: Any) -> Any:
    """Define a task of two arguments with ``options``; return it."""

    def bill(customer: str, amount: int = 1) -> None:
        """A task to put options on."""

    return app.task(name=f"bill{len(app.tasks)}", **options)(bill)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"route": "nearest"}, "route must be one of any, round_robin"),
        ({"route": "pinned"}, "broadcast=True"),
        ({"route": "hash"}, "route='hash' needs route_key="),
        ({"route": "hash", "route_key": "client"}, "route_key='client' names no argument"),
        ({"route": "hash", "route_key": 7}, "route_key must be an argument's name or a callable"),
        ({"route": "random", "route_key": "customer"}, "route_key is used by route='hash' only"),
        ({"route": "failover"}, "route='failover' needs failover=[...]"),
        ({"route": "labels"}, "route='labels' needs labels=[...]"),
        ({"labels": "gpu"}, "labels must be a list of label names"),
        ({"concurrency": 0}, "concurrency must be between 1 and 1,000,000"),
        ({"concurrency": True}, "concurrency must be a whole number"),
        ({"concurrency_key": "who"}, "concurrency_key='who' names no argument"),
        ({"rate": "100/fortnight"}, "rate"),
        ({"rate": 100}, "rate must be text like '100/m'"),
        ({"rate_key": "customer"}, "rate_key needs a rate="),
    ],
)
def test_bad_options_name_the_task_and_the_option(
    app: App, options: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        define(app, **options)
    assert str(caught.value).startswith(f"task 'bill{len(app.tasks)}': ")
    assert words in str(caught.value)


def test_ctx_cannot_be_taken_in_a_child_process(app: App) -> None:
    def body(n: int, ctx: Any) -> None:
        """Wants a context it could not have."""

    with pytest.raises(ConfigurationError, match=r"isolation='process' cannot take a run context"):
        app.task(name="proc", isolation="process")(body)


async def test_policy_fields_build_namespaced_limit_keys(app: App) -> None:
    shaped = define(
        app,
        route="hash",
        route_key="customer",
        labels=["eu", "eu", "gpu"],
        concurrency=2,
        concurrency_key=lambda customer, amount=1: customer.upper(),
        rate="10/m",
    )
    new = shaped.prepare(["acme"], {"amount": 3}, now=0.0)
    name = shaped.name
    assert (new.route, new.route_key, new.route_labels) == ("hash", "acme", ("eu", "gpu"))
    assert (new.limit_key, new.limit_max) == (f"shop:{name}:ACME", 2)
    assert (new.rate_key, new.rate_max, new.rate_period) == (f"shop:{name}", 10, 60.0)
    plain = define(app, concurrency=3, rate="5/s", rate_key="amount")
    fields = plain.policy_fields(["x"], {}, "other")
    assert fields["limit_key"] == f"other:{plain.name}"
    assert fields["rate_key"] == f"other:{plain.name}:1"  # the default of the argument
    keyed_only = define(app, concurrency_key="customer")
    assert keyed_only.policy_fields(["a"], {}, "shop")["limit_max"] == 1


async def test_a_key_that_is_not_text_or_a_number_is_refused_per_call(app: App) -> None:
    task = define(app, concurrency=1, concurrency_key="amount")
    with pytest.raises(InvalidArgumentError, match=r"concurrency_key must be a str or an int"):
        await task.defer_async("acme", amount=[1])
    boom = define(app, rate="1/s", rate_key=lambda *a, **k: 1 / 0)
    with pytest.raises(InvalidArgumentError, match=r"rate_key callable raised ZeroDivisionError"):
        await boom.defer_async("acme")


async def test_using_overrides_the_route_for_one_defer(app: App) -> None:
    task = define(app, route="hash", route_key="customer", labels=["eu"])
    handle = await task.using(route="round_robin").defer_async("acme")
    run = await app.store.get_run(handle.id)
    assert (run.route, run.route_key, tuple(run.route_labels)) == ("round_robin", None, ("eu",))
    handle = await task.using(labels=["gpu"]).defer_async("acme")
    run = await app.store.get_run(handle.id)
    assert (run.route, run.route_key, tuple(run.route_labels)) == ("hash", "acme", ("gpu",))
    with pytest.raises(InvalidArgumentError) as caught:
        task.using(route="least_busy", route_key="customer")
    assert caught.value.field == "route_key"
    with pytest.raises(InvalidArgumentError, match=r"route='failover' needs failover"):
        task.using(route="failover")


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"broadcast": True, "shards": 2}, "shards", "give broadcast or shards, not both"),
        ({"shards": 0}, "shards", "shards must be a whole number from 1 to 10,000"),
        ({"shards": 10_001}, "shards", "from 1 to 10,000"),
        ({"shards": "4"}, "shards", "shards must be a whole number"),
        ({"broadcast": "gpu"}, "broadcast", "broadcast must be True or a list of labels"),
        ({"broadcast": []}, "broadcast", "broadcast=[] names no label"),
    ],
)
async def test_bad_fan_outs_are_refused_naming_the_field(
    app: App, options: dict[str, Any], field: str, words: str
) -> None:
    task = define(app)
    with pytest.raises(InvalidArgumentError) as caught:
        task.using(**options)
    assert (caught.value.field, words in str(caught.value)) == (field, True)
    for attempt in (task.defer_async("a", **options), task.defer_many_async([["a"]], **options)):
        with pytest.raises(InvalidArgumentError) as caught:
            await attempt
        assert (caught.value.field, words in str(caught.value)) == (field, True)
    assert await app.store.list_runs(RunFilter()) == []


async def test_a_shards_defer_stores_a_waiting_parent(app: App) -> None:
    task = define(app)
    handle = await task.defer_async("acme", shards=3)
    run = await app.store.get_run(handle.id)
    assert run.state is RunState.WAITING
    assert run.children is not None
    assert (run.children.kind, run.children.total) == (FanOutKind.SHARDS, 3)
    children = await app.store.list_children(handle.id)
    assert [(c.child_index, c.shard_total, c.parent_id) for c in children] == [
        (0, 3, handle.id),
        (1, 3, handle.id),
        (2, 3, handle.id),
    ]


def test_ctx_is_not_an_argument_of_the_run(app: App) -> None:
    def body(first: int, ctx: Any, second: int = 2) -> int:
        """Takes a context between its arguments."""
        return first + second

    task = app.task(name="between")(body)
    assert task.takes_context
    assert task.signature is not None
    assert list(task.signature.parameters) == ["first", "second"]
    new = task.prepare([1, 5], {}, now=0.0)
    assert json.loads(new.args_json) == [1, 5]
    with pytest.raises(InvalidArgumentError, match=r"cannot take these arguments"):
        task.prepare([1], {"ctx": 3}, now=0.0)


async def test_shape_run_applies_a_known_tasks_policy(app: App) -> None:
    task = define(app, concurrency=1, concurrency_key="customer")
    bare = NewRun(task=task.name, queue="default", args_json='["acme"]', eta=0.0, namespace="shop")
    shaped = app.shape_run(bare)
    assert (shaped.limit_key, shaped.limit_max) == (f"shop:{task.name}:acme", 1)
    unknown = NewRun(task="elsewhere.task", queue="default", eta=0.0)
    assert app.shape_run(unknown) is unknown


def test_a_code_job_fans_out_one_way(app: App) -> None:
    def sweep() -> None:
        """A job body."""

    app.job(name="everywhere", every=60, broadcast=True)(app.task(name="sweep")(sweep))
    app.job(name="sharded", every=60, shards=4)(app.tasks["sweep"])
    assert (app.code_jobs["everywhere"].broadcast, app.code_jobs["everywhere"].shards) == (
        True,
        None,
    )
    assert app.code_jobs["sharded"].shards == 4
    with pytest.raises(ConfigurationError, match=r"give broadcast or shards, not both"):
        app.job(name="both", every=60, broadcast=True, shards=2)(app.tasks["sweep"])
    with pytest.raises(ConfigurationError, match=r"shards must be between 1 and 10000"):
        app.job(name="none", every=60, shards=0)(app.tasks["sweep"])
