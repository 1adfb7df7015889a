"""Issue 30, items 3 to 5: what a connector may touch, on each store, through the doors a user
has (the HTTP API with a ``write`` token, the Python API) and run by the connector runtime.

- File connectors touch only files under ``CRONBUS_CONNECTOR_FILES``: ``..``, absolute paths
  outside, relative paths and symlinks leading out are refused at create (422, ``config.path``),
  and a symlink swapped in after the create fails the task, with nothing read or written.
- Database connectors use only databases of ``CRONBUS_CONNECTOR_DATABASES``, never the store's
  own (even listed): its ``subscriptions`` table holds other namespaces' secrets.
- A connector uses topics of its own namespace only (409, as a subscription), and a source
  whose appends the store refuses ends ``failed`` saying why instead of ``running`` for ever.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from contract.pg import pg_database, server_url
from cronbus import App
from cronbus.connectors.allow import Reach
from cronbus.connectors.records import ConnectorSpec, Direction
from cronbus.connectors.runtime import ConnectorRuntime
from cronbus.errors import ConflictError, ConnectorNotAllowedError
from cronbus.events import generate_secret
from cronbus.services import EventInput, Services, SubscriptionInput
from integration.test_api_support import Api, each_api, problem

from .conftest import until

__all__ = ["each_api"]

DEADLINE = 30.0
SECRET = '{"secret": "root:x:0:0"}\n'


def allow(app: App, *, files: tuple[Path, ...] = (), databases: tuple[str, ...] = ()) -> None:
    """Let ``app``'s connectors touch ``files`` (directories) and ``databases``."""
    app.settings = app.settings.with_overrides(
        connector_files=tuple(map(str, files)), connector_databases=databases
    )


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """An allowed directory, and one outside it holding a secret file."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "secret.jsonl").write_text(SECRET)
    return allowed, outside


async def write_headers(api: Api, namespace: str = "default") -> dict[str, str]:
    """The ``Authorization`` header of a ``write`` token of ``namespace`` alone."""
    return {"Authorization": f"Bearer {await api.token('write', [namespace])}"}


async def post(api: Api, body: dict[str, Any], namespace: str = "default") -> Any:
    """Create a connector as a ``write`` token of ``namespace`` would."""
    return await api.client.post(
        "/v1/connectors",
        json=body,
        headers=await write_headers(api, namespace),
        params={"namespace": namespace},
    )


def file_body(kind: str, path: str, topic: str = "orders") -> dict[str, Any]:
    return {"name": "files", "kind": kind, "config": {"topic": topic, "path": path}}


@asynccontextmanager
async def running(app: App) -> AsyncIterator[ConnectorRuntime]:
    """A connector runtime (as a worker runs it) until the block ends."""
    runtime = ConnectorRuntime(
        app.store,
        app.connector_kinds,
        app.clock,
        holder="worker-sec",
        lease_seconds=2.0,
        poll_seconds=0.05,
        reach=Reach.of(app),
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(runtime.run(stopping))
    try:
        yield runtime
    finally:
        stopping.set()
        await asyncio.wait_for(task, DEADLINE)


async def failed_error(app: App, name: str) -> str:
    """The error of ``name``'s task once it failed (the test fails if it never does)."""

    async def failed() -> bool:
        task = (await app.store.get_connector(name)).tasks[0]
        return task.state.value == "failed"

    await until(failed, DEADLINE)
    error = (await app.store.get_connector(name)).tasks[0].error
    assert error is not None
    return error


# -- 3. file paths ---------------------------------------------------------------------------


def escapes(allowed: Path, outside: Path) -> list[tuple[str, str, str]]:
    """(kind, path, what the refusal says) for every way out of ``allowed``."""
    (allowed / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (allowed / "dir").symlink_to(outside, target_is_directory=True)
    return [
        ("file-source", f"{allowed}/../../../../etc/passwd", "must not contain '..'"),
        ("file-source", f"{allowed}/../outside/secret.jsonl", "must not contain '..'"),
        ("file-source", str(outside / "secret.jsonl"), "outside the directories"),
        ("file-sink", str(outside / "new.jsonl"), "outside the directories"),
        ("file-sink", "/etc/cronbus-test-created.jsonl", "outside the directories"),
        ("file-sink", "out.jsonl", "must be an absolute path"),
        ("file-source", str(allowed / "link.jsonl"), "resolved: "),
        ("file-sink", str(allowed / "dir" / "new.jsonl"), "resolved: "),
        ("file-source", str(allowed), "outside the directories"),  # the directory itself
    ]


async def test_file_paths_out_of_the_allowed_directories_are_refused_at_create(
    each_api: Api, dirs: tuple[Path, Path]
) -> None:
    allowed, outside = dirs
    allow(each_api.app, files=(allowed,))

    for kind, path, said in escapes(allowed, outside):
        found = problem(await post(each_api, file_body(kind, path)), 422, "config.path")
        assert said in found["detail"], (path, found)
    assert await Services(each_api.app).connectors.list() == []
    assert not (outside / "new.jsonl").exists()
    assert not Path("/etc/cronbus-test-created.jsonl").exists()


async def test_file_connectors_are_refused_when_no_directory_is_allowed(
    each_api: Api, dirs: tuple[Path, Path]
) -> None:
    allowed, _ = dirs  # the default: CRONBUS_CONNECTOR_FILES empty
    for kind in ("file-source", "file-sink"):
        body = file_body(kind, str(allowed / "in.jsonl"))
        found = problem(await post(each_api, body), 422, "config.path")
        assert "CRONBUS_CONNECTOR_FILES" in found["detail"]
    with pytest.raises(ConnectorNotAllowedError) as refused:  # the Python API: the same rule
        await Services(each_api.app).connectors.create(
            "files", "file-sink", {"topic": "orders", "path": str(allowed / "x.jsonl")}
        )
    assert "switched off" in str(refused.value)


async def test_allowed_files_are_read_and_written_end_to_end(
    each_api: Api, dirs: tuple[Path, Path]
) -> None:
    allowed, _ = dirs
    allow(each_api.app, files=(allowed,))
    (allowed / "in.jsonl").write_text('{"n": 1}\n{"n": 2}\n')
    source = {**file_body("file-source", str(allowed / "in.jsonl")), "name": "in"}
    sink = {**file_body("file-sink", str(allowed / "out.jsonl")), "name": "out"}
    assert (await post(each_api, source)).status_code == 201
    assert (await post(each_api, sink)).status_code == 201

    out = allowed / "out.jsonl"
    async with running(each_api.app):

        async def written() -> bool:
            return out.exists() and out.read_text().count("\n") == 2

        await until(written, DEADLINE)
    assert [json.loads(line)["data"] for line in out.read_text().splitlines()] == [
        {"n": 1},
        {"n": 2},
    ]


async def test_a_symlink_swapped_in_after_create_fails_the_task_and_reads_nothing(
    each_api: Api, dirs: tuple[Path, Path]
) -> None:
    allowed, outside = dirs
    allow(each_api.app, files=(allowed,))
    path = allowed / "in.jsonl"
    path.write_text("")
    assert (await post(each_api, file_body("file-source", str(path)))).status_code == 201
    path.unlink()
    path.symlink_to(outside / "secret.jsonl")

    async with running(each_api.app):
        error = await failed_error(each_api.app, "files")
    assert "outside the directories" in error
    shown = (await each_api.call("GET", "/v1/connectors/files")).json()
    assert [t["task"]["state"] for t in shown["tasks"]] == ["failed"]
    assert "outside the directories" in shown["tasks"][0]["task"]["error"]
    assert (await each_api.app.store.get_topic("orders")).last_offset == 0
    dead = await each_api.call("GET", "/v1/connectors/files/dead-records")
    assert dead.json()["items"] == []
    assert "root:x" not in dead.text


async def test_a_sink_whose_file_became_a_symlink_out_fails_and_writes_nothing(
    each_api: Api, dirs: tuple[Path, Path]
) -> None:
    allowed, outside = dirs
    allow(each_api.app, files=(allowed,))
    path = allowed / "out.jsonl"
    assert (await post(each_api, file_body("file-sink", str(path)))).status_code == 201
    await Services(each_api.app).topics.publish("orders", [_event()])
    path.symlink_to(outside / "secret.jsonl")

    async with running(each_api.app):
        error = await failed_error(each_api.app, "files")
    assert "outside the directories" in error
    assert (outside / "secret.jsonl").read_text() == SECRET


def _event() -> EventInput:
    return EventInput(type="order.created", data={"id": 1})


# -- 4. databases ----------------------------------------------------------------------------


def store_table(app: App) -> tuple[str, str]:
    """A connector URL naming the store's own database, and its ``subscriptions`` table."""
    url = app.store_url
    if url.startswith("sqlite"):
        return url, "subscriptions"
    schema = dict(parse_qsl(urlsplit(url).query))["schema"]
    return server_url(), f"{schema}.subscriptions"


async def test_a_source_or_sink_on_the_store_itself_is_refused_even_when_listed(
    each_api: Api,
) -> None:
    url, table = store_table(each_api.app)
    allow(each_api.app, databases=(url,))
    await Services(each_api.app).subscriptions.create(_webhook_subscription())
    source = {
        "name": "steal",
        "kind": "sql-source",
        "config": {"url": url, "table": table, "key": "name", "topic": "loot"},
    }

    found = problem(await post(each_api, source), 422, "config.url")
    assert "store's own database" in found["detail"]
    if not url.startswith("sqlite"):
        sink = {
            "name": "overwrite",
            "kind": "postgres-sink",
            "config": {"url": url, "table": table, "topic": "orders"},
        }
        found = problem(await post(each_api, sink), 422, "config.url")
        assert "store's own database" in found["detail"]
    assert await Services(each_api.app).connectors.list() == []


def _webhook_subscription() -> SubscriptionInput:
    return SubscriptionInput(
        name="hooks",
        topic="orders",
        webhook="http://127.0.0.1:9/hook",
        secrets=[generate_secret()],
        headers={"Authorization": "Bearer other"},
    )


def table_db(path: Path) -> str:
    """An SQLite database with an ``orders`` table of two rows; its URL."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(1, "a"), (2, "b")])
    return f"sqlite:///{path}"


async def test_a_database_not_listed_is_refused(each_api: Api, tmp_path: Path) -> None:
    listed = table_db(tmp_path / "listed.db")
    other = table_db(tmp_path / "other.db")
    for databases in ((), (listed,)):
        allow(each_api.app, databases=databases)
        source = {
            "name": "rows",
            "kind": "sql-source",
            "config": {"url": other, "table": "orders", "key": "id", "topic": "rows"},
        }
        found = problem(await post(each_api, source), 422, "config.url")
        assert "CRONBUS_CONNECTOR_DATABASES" in found["detail"]
        assert listed not in found["detail"]  # the list may hold passwords: never shown
        sink = {
            "name": "upserts",
            "kind": "postgres-sink",
            "config": {"url": "postgresql://127.0.0.1:5432/elsewhere", "table": "t", "topic": "x"},
        }
        problem(await post(each_api, sink), 422, "config.url")
    assert await Services(each_api.app).connectors.list() == []


async def test_an_allowed_database_is_read_end_to_end(each_api: Api, tmp_path: Path) -> None:
    url = table_db(tmp_path / "shop.db")
    # Listed by another spelling of the same file: compared resolved.
    allow(each_api.app, databases=(f"sqlite:///{tmp_path}/./shop.db?mode=ro",))
    source = {
        "name": "rows",
        "kind": "sql-source",
        "config": {"url": url, "table": "orders", "key": "id", "topic": "rows"},
    }
    assert (await post(each_api, source)).status_code == 201

    async with running(each_api.app):

        async def read() -> bool:
            return (await each_api.app.store.get_topic("rows")).last_offset == 2

        await until(read, DEADLINE)
    events = await each_api.app.store.read_events("rows", 0, 10)
    assert [e.data for e in events] == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]


async def test_an_allowed_postgres_database_is_written_end_to_end(
    each_api: Api, request: pytest.FixtureRequest
) -> None:
    import psycopg

    database = pg_database(request)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE latest (key text PRIMARY KEY, data jsonb NOT NULL)")
    # Listed with another password and options: ignored, the database is the same.
    parts = urlsplit(database)
    netloc = f"{parts.username or 'postgres'}:other@{parts.hostname}:{parts.port or 5432}"
    allow(each_api.app, databases=(parts._replace(netloc=netloc, query="sslmode=prefer").geturl(),))
    sink = {
        "name": "upserts",
        "kind": "postgres-sink",
        "config": {"url": database, "table": "latest", "topic": "orders"},
    }
    made = await post(each_api, sink)
    assert made.status_code == 201, made.text
    await Services(each_api.app).topics.publish("orders", [_event()])

    async with running(each_api.app):

        def rows() -> list[Any]:
            with psycopg.connect(database) as conn:
                return conn.execute("SELECT data FROM latest").fetchall()

        async def written() -> bool:
            return len(await asyncio.to_thread(rows)) == 1

        await until(written, DEADLINE)
    assert rows() == [({"id": 1},)]


# -- 5. namespaces ---------------------------------------------------------------------------


async def test_a_connector_on_another_namespaces_topic_is_refused_like_a_subscription(
    each_api: Api, dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    allowed, _ = dirs
    rows = table_db(tmp_path / "rows.db")
    allow(each_api.app, files=(allowed,), databases=(rows,))
    await Services(each_api.app).namespaces.create("billing")
    await Services(each_api.app).topics.publish("orders", [_event()])  # default's topic
    subscription = {"name": "peek", "topic": "orders", "webhook": "http://127.0.0.1:9/x"}
    response = await each_api.client.post(
        "/v1/subscriptions",
        json=subscription,
        headers=await write_headers(each_api, "billing"),
        params={"namespace": "billing"},
    )
    said = problem(response, 409)["detail"]

    sql = {"url": rows, "table": "orders", "key": "id", "topic": "orders"}
    for body in (
        file_body("file-sink", str(allowed / "out.jsonl")),
        file_body("file-source", str(allowed / "in.jsonl")),
        {"name": "rows", "kind": "sql-source", "config": sql},
    ):
        found = problem(await post(each_api, body, "billing"), 409)
        assert "belongs to another namespace" in found["detail"]
        assert "default" not in found["detail"]
        assert said.split(";")[0] == found["detail"].split(";")[0]
    billing = Services(each_api.app, namespace="billing").connectors
    with pytest.raises(ConflictError):
        await billing.create("out", "file-sink", {"topic": "orders", "path": str(allowed / "o")})
    assert await billing.list() == []

    # A topic no one has written is claimed by the connector's namespace at create.
    made = await post(
        each_api, file_body("file-sink", str(allowed / "b.jsonl"), "invoices"), "billing"
    )
    assert made.status_code == 201, made.text
    problem(await each_api.call("POST", "/v1/topics/invoices/events", json=_publish()), 409)


def _publish() -> dict[str, Any]:
    return {"type": "invoice.created", "data": {"id": 1}}


async def stored_connector(app: App, name: str, kind: str, topic: str, config: Any) -> None:
    """A connector of ``billing`` on ``topic`` as an older cronbus accepted it (no namespace
    check at create): written to the store as the service used to."""
    plugin = app.connector_kinds.get(kind, Reach.of(app))
    direction = Direction.SOURCE if kind.endswith("source") else Direction.SINK
    checked = plugin.validate(config)
    spec = ConnectorSpec(
        name=name,
        kind=kind,
        direction=direction,
        topic=topic,
        config=checked,
        namespace="billing",
    )
    await app.store.create_connector(spec, [checked], app.clock.now())


async def test_a_source_whose_appends_are_refused_ends_failed_not_running(
    each_api: Api, dirs: tuple[Path, Path]
) -> None:
    allowed, outside = dirs
    allow(each_api.app, files=(allowed,))
    await Services(each_api.app).namespaces.create("billing")
    await Services(each_api.app).topics.publish("orders", [_event()])
    (allowed / "in.jsonl").write_text('{"n": 1}\n')
    config = {"topic": "orders", "path": str(allowed / "in.jsonl")}
    await stored_connector(each_api.app, "in", "file-source", "orders", config)
    sink = {"topic": "orders", "path": str(allowed / "out.jsonl")}
    await stored_connector(each_api.app, "out", "file-sink", "orders", sink)

    async with running(each_api.app):
        source_error = await failed_error(each_api.app, "in")
        sink_error = await failed_error(each_api.app, "out")
    assert "another namespace" in source_error
    assert "'default'" not in source_error  # whose topic it is stays unsaid
    assert "another namespace" in sink_error
    assert (await each_api.app.store.get_topic("orders")).last_offset == 1
    assert not (allowed / "out.jsonl").exists()
    shown = await Services(each_api.app, namespace="billing").connectors.get("in")
    assert shown.state == "failed"
    assert os.path.exists(outside / "secret.jsonl")
