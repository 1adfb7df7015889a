"""Payload redaction through the services and the HTTP API, on a real SQLite file with a real
worker: a task's ``redact`` option hides the arguments it names (by keyword and by position)
or, with ``True``, every argument and the result, from every token; a token made without the
payloads permission sees every run redacted; a search by payload is refused where it would
reveal a hidden value; local code sees everything. Also the option's checks and the tokens'
``payloads`` field in the API and the CLI."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cronbus import App, Worker
from cronbus.cli import cronbus
from cronbus.errors import ConfigurationError, ForbiddenError, InvalidArgumentError
from cronbus.model import FanOut, FanOutKind, NewRun
from cronbus.services import RunQuery, Services
from cronbus.services import operations as ops
from cronbus.services.redaction import REDACTED
from cronbus.states import RunState
from integration.test_api_support import Api, make_app, problem, served, until


def redacting_app(url: str) -> App:
    """The API tests' app plus tasks that redact."""
    app = make_app(url)

    @app.task(name="login", redact=("password",))
    def login(user: str, password: str, remember: bool = False) -> str:
        return f"welcome {user}"

    @app.task(name="vault", redact=True)
    def vault(secret: str, *, note: str = "") -> dict[str, str]:
        return {"sealed": secret[::-1]}

    @app.task(name="charge", redact=("card",), retries=0)
    def charge(card: str, amount: int) -> None:
        raise RuntimeError("declined")

    return app


@dataclass
class World:
    """The served app with its runs ended by a real worker, and tokens."""

    api: Api
    login_positional: int
    login_keyword: int
    vault: int
    charge: int
    send: int


async def _ended(app: App, ids: Sequence[int]) -> None:
    async def settled() -> bool:
        runs = await app.store.get_runs(list(ids))
        return all(run.state in (RunState.SUCCEEDED, RunState.DEAD) for run in runs)

    worker = Worker(app, concurrency=2, queues="*")
    running = asyncio.create_task(worker.run())
    try:
        await until(settled, timeout=30.0)
    finally:
        worker.request_stop(hurry=True)
        await asyncio.wait_for(running, 15)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """Runs of each task, ended: login twice (password by position, then by keyword), vault,
    charge (dead) and send (nothing redacted)."""
    async with served(redacting_app(f"sqlite:///{tmp_path / 'api.db'}")) as api:
        runs = Services(api.app).runs
        made = [
            (await runs.defer("login", ["ada", "hunter2"])).run.id,
            (await runs.defer("login", kwargs={"user": "bob", "password": "pw-bob"})).run.id,
            (await runs.defer("vault", ["s3cret"], {"note": "n"})).run.id,
            (await runs.defer("charge", ["4111-1111", 20])).run.id,
            (await runs.defer("send", ["ann@example.org"])).run.id,
        ]
        await _ended(api.app, made)
        yield World(api, *made)
        await ops.wait_all()


async def _services(world: World, scope: str = "admin", *, payloads: bool = True) -> Services:
    """Services with the access of a new token (as the API and the console authenticate)."""
    app = world.api.app
    _, text = await Services(app).tokens.create(
        name=f"{scope}-{payloads}", scope=scope, namespaces=["*"], payloads=payloads
    )
    return Services(app, await Services(app).tokens.authenticate(text))


async def test_a_tasks_redact_option_hides_what_it_names_from_every_token(world: World) -> None:
    services = await _services(world)
    assert services.access.payloads is True
    positional = await services.runs.get(world.login_positional)
    assert positional.args == ["ada", REDACTED]
    assert positional.result == "welcome ada"  # only what is named is hidden
    keyword = await services.runs.get(world.login_keyword)
    assert keyword.kwargs == {"user": "bob", "password": REDACTED}
    vault = await services.runs.show(world.vault)
    assert vault.run.args == [REDACTED]
    assert vault.run.kwargs == {"note": REDACTED}
    assert vault.run.result == REDACTED
    assert [a.result for a in vault.attempts] == [REDACTED]
    send = await services.runs.get(world.send)
    assert send.args == ["ann@example.org"]
    assert send.result == "hi ann@example.org"
    listed = {run.id: run for run in (await services.runs.list()).items}
    assert listed[world.login_positional].args == ["ada", REDACTED]
    assert listed[world.vault].result == REDACTED
    dead = (await services.dead_letters.list(kind="runs")).items
    assert [(d.id, d.run.args if d.run else None) for d in dead] == [(world.charge, [REDACTED, 20])]
    retried = await services.runs.retry(world.charge)
    assert retried.args == [REDACTED, 20]
    cancelled = await services.runs.cancel(world.charge)
    assert cancelled.args == [REDACTED, 20]


async def test_local_code_sees_payloads_whole(world: World) -> None:
    local = Services(world.api.app)
    assert (await local.runs.get(world.login_positional)).args == ["ada", "hunter2"]
    assert (await local.runs.get(world.vault)).result == {"sealed": "terc3s"}


async def test_a_token_without_payloads_sees_every_run_redacted(world: World) -> None:
    services = await _services(world, "read", payloads=False)
    assert services.access.payloads is False
    send = await services.runs.show(world.send)
    assert send.run.args == [REDACTED]
    assert send.run.result == REDACTED
    assert [a.result for a in send.attempts] == [REDACTED]
    login = await services.runs.get(world.login_keyword)
    assert login.kwargs == {"user": REDACTED, "password": REDACTED}
    for run in (await services.runs.list()).items:
        assert all(value == REDACTED for value in run.args)
        assert all(value == REDACTED for value in run.kwargs.values())
        assert run.result in (None, REDACTED)
    (dead,) = (await services.dead_letters.list(kind="runs")).items
    assert dead.run is not None
    assert dead.run.args == [REDACTED, REDACTED]
    assert dead.run.error is not None  # errors are shown: they say what went wrong
    assert dead.run.error.message == "declined"


async def test_children_are_redacted_by_their_own_task(world: World) -> None:
    app = world.api.app
    now = app.clock.now()
    parent = NewRun(
        task="login",
        queue="default",
        args_json=json.dumps(["cy", "pw-cy"]),
        eta=now + 3600,
        fanout=FanOut(kind=FanOutKind.SHARDS, shards=2),
    )
    (made,) = await app.store.defer([parent], now)
    services = await _services(world)
    detail = await services.runs.show(made.id)
    assert len(detail.children) == 2
    page = await services.runs.children(made.id)
    for child in [*detail.children, *page.items]:
        assert "pw-cy" not in json.dumps([child.args, child.kwargs])
    blind = await _services(world, "read", payloads=False)
    for child in (await blind.runs.children(made.id)).items:
        assert "cy" not in json.dumps([child.args, child.kwargs])


async def test_a_search_never_reveals_a_hidden_value(world: World) -> None:
    services = await _services(world)
    found = await services.runs.list(RunQuery(task="login", args=[("user", "bob")]))
    assert [run.id for run in found.items] == [world.login_keyword]
    by_position = await services.runs.list(RunQuery(args=[("0", "ann@example.org")]))
    assert [run.id for run in by_position.items] == [world.send]
    with pytest.raises(ForbiddenError, match="task 'login' redacts argument 'password'"):
        await services.runs.list(RunQuery(task="login", args=[("password", "pw-bob")]))
    with pytest.raises(ForbiddenError, match="task 'login' redacts argument '1'"):
        await services.runs.list(RunQuery(task="login", args=[("1", "hunter2")]))
    # Searching every task, the runs whose task hides the argument are left out: the local
    # owner finds them, a token does not.
    local = Services(world.api.app)
    for matches in ([("1", "hunter2")], [("password", "pw-bob")], [("0", "s3cret")]):
        assert len((await local.runs.list(RunQuery(args=matches))).items) == 1
        assert (await services.runs.list(RunQuery(args=matches))).items == []
    assert (await services.runs.list(RunQuery(id=world.vault, args=[("0", "s3cret")]))).items == []
    blind = await _services(world, "read", payloads=False)
    with pytest.raises(ForbiddenError, match="without the payloads permission"):
        await blind.runs.list(RunQuery(args=[("user", "bob")]))
    writer = await _services(world, "write", payloads=False)
    with pytest.raises(ForbiddenError, match="without the payloads permission"):
        await writer.operations.start("runs.retry", filter={"args": [["user", "bob"]]})


async def test_bad_matches_are_refused_naming_args(world: World) -> None:
    services = await _services(world)
    bad: list[tuple[Any, str]] = [
        ("user", "a list of (argument, value) pairs"),
        ([("user",)], "(argument, value) pairs"),
        ([("a-b", 1)], "names a keyword argument or a position from 0"),
        ([("01", 1)], "names a keyword argument or a position from 0"),
        ([("u", 1), ("u", 2)], "argument 'u' is matched twice"),
        ([("u", float("nan"))], "is not a JSON number"),
    ]
    for matches, message in bad:
        with pytest.raises(InvalidArgumentError, match=re.escape(message)) as caught:
            await services.runs.list(RunQuery(args=matches))
        assert caught.value.field == "args"
    with pytest.raises(InvalidArgumentError) as caught:
        await services.operations.start("runs.retry", filter={"args": [["a-b", 1]]})
    assert caught.value.field == "filter.args"


async def test_a_bulk_retry_by_argument_and_by_id(world: World) -> None:
    services = await _services(world)
    op = await services.operations.start("runs.cancel", filter={"args": [["user", "nobody"]]})
    assert op.request == {
        "filter": {"args": [["user", "nobody"]], "states": ["scheduled", "queued", "running"]}
    }
    op = await services.operations.start(
        "runs.retry", filter={"task": "charge", "args": [["1", 20]]}
    )

    async def ended() -> bool:
        return (await services.operations.get(op.id)).state.terminal

    await until(ended)
    done = await services.operations.get(op.id)
    assert (done.total, done.done, done.failed) == (1, 1, 0)
    assert (await services.runs.get(world.charge)).state is RunState.QUEUED
    one = await services.runs.list(RunQuery(id=world.send))
    assert [run.id for run in one.items] == [world.send]
    assert (await services.runs.list(RunQuery(id=world.send, task="login"))).items == []


def test_the_redact_option_is_checked_when_the_task_is_defined() -> None:
    app = App()

    def refused(message: str, **options: Any) -> None:
        def fn(user: str, password: str, *rest: Any, **extra: Any) -> None:
            return None

        def strict(user: str, password: str) -> None:
            return None

        target = strict if options.pop("strict", False) else fn
        with pytest.raises(ConfigurationError, match=message):
            app.task(name=f"t{len(app.tasks)}", **options)(target)

    refused(r"redact must be True .* got 'password'", redact="password")
    refused("redact must be True", redact=3)
    refused("redact names arguments, got 3", redact=[3])
    refused(r"redact='rest' names the \*rest parameter", redact=["rest"])
    refused(
        r"names no argument of the function \(its arguments: user, password\)",
        redact=["pin"],
        strict=True,
    )

    @app.task(name="open", redact=["user", "anything"])
    def open_ended(user: str, **extra: Any) -> None:
        return None

    assert open_ended.redaction.names == frozenset({"user", "anything"})
    assert open_ended.redaction.positions == frozenset({0})

    @app.task(name="plain", redact=False)
    def plain(user: str) -> None:
        return None

    assert not plain.redaction.hides_any


async def test_the_api_creates_and_lists_tokens_without_payloads(world: World) -> None:
    api = world.api
    made = await api.call(
        "POST", "/v1/tokens", json={"name": "support", "scope": "read", "payloads": False}
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["payloads"] is False
    listed = (await api.call("GET", "/v1/tokens")).json()["items"]
    assert {t["name"]: t["payloads"] for t in listed}["support"] is False
    default = await api.call("POST", "/v1/tokens", json={"name": "ops", "scope": "read"})
    assert default.json()["payloads"] is True
    problem(
        await api.call(
            "POST", "/v1/tokens", json={"name": "x", "scope": "read", "payloads": "maybe"}
        ),
        422,
    )
    blind = {"Authorization": f"Bearer {body['token']}"}
    shown = (await api.client.get(f"/v1/runs/{world.send}", headers=blind)).json()
    assert shown["run"]["args"] == [REDACTED]
    assert shown["run"]["result"] == REDACTED
    assert [a["result"] for a in shown["attempts"]] == [REDACTED]
    # An admin with payloads sees them, but for what the task itself redacts.
    seen = (await api.call("GET", f"/v1/runs/{world.send}")).json()
    assert seen["run"]["args"] == ["ann@example.org"]
    login = (await api.call("GET", f"/v1/runs/{world.login_keyword}")).json()
    assert login["run"]["kwargs"] == {"user": "bob", "password": REDACTED}
    vault = (await api.call("GET", "/v1/runs", params={"task": "vault"})).json()
    assert [r["result"] for r in vault["items"]] == [REDACTED]
    dead = (await api.client.get("/v1/dead-letters", headers=blind)).json()["items"]
    assert [d["run"]["args"] for d in dead] == [[REDACTED, REDACTED]]


def test_the_cli_creates_and_lists_a_token_without_payloads(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner(env={"COLUMNS": "200"})  # a table as wide as it needs
    made = runner.invoke(
        cronbus,
        [
            "tokens",
            "create",
            "--store",
            store,
            "--scope",
            "read",
            "--namespace",
            "default",
            "--name",
            "support",
            "--no-payloads",
            "--json",
        ],
    )
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["payloads"] is False
    plain = runner.invoke(
        cronbus, ["tokens", "create", "--store", store, "--scope", "read", "--namespace", "default"]
    )
    assert plain.exit_code == 0, plain.output
    assert "payloads redacted" not in plain.output
    listed = runner.invoke(cronbus, ["tokens", "list", "--store", store, "--json"])
    assert listed.exit_code == 0, listed.output
    assert [t["payloads"] for t in json.loads(listed.output)] == [False, True]
    table = runner.invoke(cronbus, ["tokens", "list", "--store", store])
    assert "PAYLOADS" in table.output
    assert "redacted" in table.output


async def test_the_cli_through_a_server_shows_payloads(world: World) -> None:
    await Services(world.api.app).tokens.create("blind", "read", ["default"], payloads=False)
    admin = await world.api.token()
    remote = ["--url", world.api.url, "--token", admin]
    runner = CliRunner(env={"COLUMNS": "200"})

    def cli(*args: str) -> Any:
        return runner.invoke(cronbus, [*args, *remote])

    listed = await asyncio.to_thread(cli, "tokens", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert {t["name"]: t["payloads"] for t in json.loads(listed.output)}["blind"] is False
    made = await asyncio.to_thread(
        cli, "tokens", "create", "--scope", "read", "--namespace", "default", "--json"
    )
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["payloads"] is True
    blind = await asyncio.to_thread(
        cli,
        "tokens",
        "create",
        "--scope",
        "read",
        "--namespace",
        "default",
        "--no-payloads",
        "--json",
    )
    assert blind.exit_code == 0, blind.output
    assert json.loads(blind.output)["payloads"] is False
    access = await Services(world.api.app).tokens.authenticate(json.loads(blind.output)["token"])
    assert access.payloads is False
