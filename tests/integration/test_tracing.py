"""Traces (OpenTelemetry, the ``otel`` extra): one trace from a caller's span through each
attempt of its run, a span per webhook delivery with ``traceparent`` sent, and nothing at all
without the extra. Spans go to the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from aiohttp import web
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from contract.pg import pg_store_url
from cronbus import App, RunState, Worker
from cronbus.config import Settings
from cronbus.events import make_event
from cronbus.events.dispatcher import Dispatcher
from cronbus.observability import tracing
from cronbus.testing import run_until_idle_async

from .conftest import until

_EXPORTER = InMemorySpanExporter()


def _provider() -> None:
    """The process's tracer provider, set once (OpenTelemetry refuses to replace it)."""
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)


_provider()
tracer = trace.get_tracer("tests")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The exporter, emptied for the test."""
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def build_app(url: str) -> App:
    """An app with a task that succeeds (spanning inside, in its thread), one that fails and
    an async one."""
    app = App(url)
    app.settings = Settings(lease_seconds=3.0, poll_seconds=0.2, grace_seconds=5.0)

    @app.task(name="tracing.add")
    def add(a: int, b: int) -> int:
        with tracer.start_as_current_span("inside add"):
            return a + b

    @app.task(name="tracing.boom")
    def boom() -> None:
        raise ValueError("boom at the end")

    @app.task(name="tracing.wait")
    async def wait() -> str:
        with tracer.start_as_current_span("inside wait"):
            await asyncio.sleep(0)
        return "ok"

    return app


@pytest.fixture(params=["sqlite", "postgres"])
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[App]:
    """The tracing app open on a fresh store of each kind."""
    if request.param == "postgres":
        url = await pg_store_url(request)
    else:
        url = f"sqlite:///{tmp_path / 'tracing.db'}"
    opened = build_app(url)
    async with opened:
        yield opened


@pytest.fixture
async def worker(app: App) -> AsyncIterator[Worker]:
    """A running worker of ``app``."""
    w = Worker(app, concurrency=2, queues="default")
    task = asyncio.create_task(w.run())
    yield w
    w.request_stop(hurry=True)
    await asyncio.wait_for(task, 10)


def traceparent(ctx: SpanContext) -> str:
    """The W3C ``traceparent`` of a span context."""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def ancestors(spans: InMemorySpanExporter, span: ReadableSpan) -> list[int]:
    """The span ids of ``span``'s parents, nearest first, up to one not exported here."""
    by_id = {s.context.span_id: s for s in spans.get_finished_spans() if s.context is not None}
    chain: list[int] = []
    while span.parent is not None:
        chain.append(span.parent.span_id)
        if span.parent.span_id not in by_id:
            break
        span = by_id[span.parent.span_id]
    return chain


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name``."""
    return [s for s in spans.get_finished_spans() if s.name == name]


async def finished(spans: InMemorySpanExporter, name: str, count: int = 1) -> list[ReadableSpan]:
    """Wait until ``count`` spans called ``name`` ended (a span ends after its run is stored)."""

    async def enough() -> bool:
        return len(named(spans, name)) >= count

    await until(enough)
    return named(spans, name)


async def test_a_run_continues_its_callers_trace(
    app: App, worker: Worker, spans: InMemorySpanExporter
) -> None:
    add = app.get_task("tracing.add")
    with tracer.start_as_current_span("web request") as caller:
        handle = await add.defer_async(2, 3)
    assert (await handle.wait_async(10)).result == 5
    (run_span,) = await finished(spans, "run tracing.add")
    (inside,) = named(spans, "inside add")
    ctx = caller.get_span_context()
    # One trace: the caller's span -> the attempt -> the task's own span (in its thread).
    assert run_span.context is not None
    assert inside.context is not None
    assert run_span.context.trace_id == ctx.trace_id
    assert run_span.parent is not None
    assert run_span.parent.span_id == ctx.span_id
    assert inside.context.trace_id == ctx.trace_id
    assert inside.parent is not None
    assert inside.parent.span_id == run_span.context.span_id
    assert run_span.kind is SpanKind.CONSUMER
    assert run_span.attributes is not None
    assert (
        dict(run_span.attributes).items()
        >= {
            "cronbus.run.id": handle.id,
            "cronbus.run.attempt": 1,
            "cronbus.task": "tracing.add",
            "cronbus.queue": "default",
            "cronbus.run.outcome": "succeeded",
        }.items()
    )
    assert run_span.status.status_code is StatusCode.UNSET


async def test_each_failed_attempt_records_its_exception(
    app: App, worker: Worker, spans: InMemorySpanExporter
) -> None:
    boom = app.get_task("tracing.boom")
    with tracer.start_as_current_span("caller") as caller:
        handle = await boom.using(queue="default").defer_async()
    run = await handle.wait_async(10, raise_error=False)
    assert run.state is RunState.DEAD
    (span,) = await finished(spans, "run tracing.boom")
    assert span.context is not None
    assert span.context.trace_id == caller.get_span_context().trace_id
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is not None
    assert "boom at the end" in span.status.description
    assert span.attributes is not None
    assert span.attributes["cronbus.run.outcome"] == "failed"
    (event,) = [e for e in span.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "boom at the end"
    assert "ValueError" in str(event.attributes["exception.stacktrace"])


async def test_an_async_task_sees_its_attempt_span(app: App, spans: InMemorySpanExporter) -> None:
    with tracer.start_as_current_span("caller"):
        await app.get_task("tracing.wait").defer_async()
    await run_until_idle_async(app)
    (run_span,) = named(spans, "run tracing.wait")
    (inside,) = named(spans, "inside wait")
    assert run_span.context is not None
    assert inside.parent is not None
    assert inside.parent.span_id == run_span.context.span_id


async def test_the_context_is_stored_with_the_payload_and_null_without_a_span(
    app: App, spans: InMemorySpanExporter
) -> None:
    add = app.get_task("tracing.add")
    plain = await add.defer_async(1, 1)
    with tracer.start_as_current_span("caller") as caller:
        traced = await add.defer_async(1, 2)
    stored = await _stored_traces(app, [plain.id, traced.id])
    assert stored[plain.id] is None
    carrier = json.loads(stored[traced.id] or "")
    ctx = caller.get_span_context()
    assert carrier["traceparent"] == traceparent(ctx)
    # A run without a stored context still gets its attempt a span: the root of a new trace.
    await run_until_idle_async(app)
    roots = [s for s in named(spans, "run tracing.add") if s.parent is None]
    assert [s.attributes["cronbus.run.id"] for s in roots if s.attributes] == [plain.id]


async def test_the_sync_defer_carries_the_callers_context(
    app: App, spans: InMemorySpanExporter
) -> None:
    # defer() hands its coroutine to the app's loop: the caller's context goes with it.
    add = app.get_task("tracing.add")

    def call() -> tuple[int, int]:
        with tracer.start_as_current_span("sync caller") as caller:
            return add.defer(4, 4).id, caller.get_span_context().trace_id

    run_id, trace_id = await asyncio.to_thread(call)
    await run_until_idle_async(app)
    (run_span,) = named(spans, "run tracing.add")
    assert run_span.context is not None
    assert run_span.context.trace_id == trace_id
    assert run_span.attributes is not None
    assert run_span.attributes["cronbus.run.id"] == run_id


async def test_without_the_extra_hooks_do_nothing(
    app: App, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "ENABLED", False)
    with tracer.start_as_current_span("caller"):
        handle = await app.get_task("tracing.add").defer_async(1, 2)
    assert (await _stored_traces(app, [handle.id]))[handle.id] is None
    (run,) = await run_until_idle_async(app)
    assert run.result == 3
    assert named(spans, "run tracing.add") == []


async def test_the_http_api_defer_reads_a_traceparent_header(
    app: App, spans: InMemorySpanExporter
) -> None:
    from httpx import ASGITransport, AsyncClient

    from cronbus.api import ApiSettings, create_api
    from cronbus.services import Services

    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    _, token = await Services(app).tokens.create(name="t", scope="admin", namespaces=["*"])
    api = create_api(app, ApiSettings(rate=1_000_000))
    async with AsyncClient(transport=ASGITransport(app=api), base_url="http://api") as client:
        response = await client.post(
            "/v1/runs",
            json={"task": "tracing.add", "args": [5, 6]},
            headers={
                "traceparent": f"00-{trace_id}-{parent_id}-01",
                "authorization": f"Bearer {token}",
            },
        )
    assert response.status_code == 201, response.text
    await run_until_idle_async(app)
    (run_span,) = named(spans, "run tracing.add")
    assert run_span.context is not None
    assert f"{run_span.context.trace_id:032x}" == trace_id
    # FastAPI makes spans of its own from the header; the run's parent is one of them (the
    # endpoint's), and the chain of parents leads back to the caller's span.
    assert f"{ancestors(spans, run_span)[-1]:016x}" == parent_id


async def _stored_traces(app: App, run_ids: list[int]) -> dict[int, str | None]:
    """The ``trace`` column of ``run_payloads`` for these runs, read past the store's API."""
    url = app.store_url
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            rows = conn.execute(
                "SELECT run_id, trace FROM run_payloads WHERE run_id IN "
                f"({','.join('?' * len(run_ids))})",
                run_ids,
            ).fetchall()
        finally:
            conn.close()
        return dict(rows)
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    schema = dict(parse_qsl(parts.query))["schema"]
    query = sql.SQL("SELECT run_id, trace FROM {}.run_payloads WHERE run_id = ANY(%s)")
    with psycopg.connect(parts._replace(query="").geturl(), autocommit=True) as pg:
        return dict(pg.execute(query.format(sql.Identifier(schema)), (run_ids,)).fetchall())


# -- deliveries -------------------------------------------------------------------------------
@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An aiohttp server on loopback that answers 200 and records each request's headers."""
    seen: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        seen.append({"headers": dict(request.headers), "body": await request.json()})
        return web.Response(status=200 if len(seen) > 1 else 500)  # the first push fails

    server = web.Application()
    server.router.add_post("/hook", hook)
    runner = web.AppRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/hook", seen
    await runner.cleanup()


async def test_a_webhook_delivery_is_a_span_sent_as_traceparent(
    app: App,
    spans: InMemorySpanExporter,
    receiver: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = receiver
    await app.subscriptions.add(
        "traced-hook", topic="orders", webhook=url, backoff=0.05, max_backoff=0.1
    )
    with tracer.start_as_current_span("publisher") as publisher:
        await app.publish_many_async("orders", [make_event("order.created", {"n": 1})])
    stopping = asyncio.Event()
    dispatcher = Dispatcher(app, lease_seconds=3.0, poll_seconds=0.2)
    running = asyncio.create_task(dispatcher.run(stopping))
    try:
        delivered = await finished(spans, "deliver traced-hook", count=2)
    finally:
        stopping.set()
        await asyncio.wait_for(running, 30)
    assert len(seen) == 2  # one failed push, one acknowledged: a span each
    by_attempt = {s.attributes["cronbus.delivery.attempt"]: s for s in delivered if s.attributes}
    assert by_attempt[1].status.status_code is StatusCode.ERROR
    assert by_attempt[2].status.status_code is StatusCode.UNSET
    for request, span in zip(seen, [by_attempt[1], by_attempt[2]], strict=True):
        assert span.context is not None
        assert span.kind is SpanKind.PRODUCER
        assert request["headers"]["traceparent"] == traceparent(span.context)
        assert span.attributes is not None
        assert span.attributes["cronbus.event.id"] == request["body"]["id"]
        assert span.attributes["cronbus.subscription"] == "traced-hook"
    assert by_attempt[2].attributes is not None
    assert by_attempt[2].attributes["http.response.status_code"] == 200
    # Both pushes continue the publisher's trace, as children of its span.
    ctx = publisher.get_span_context()
    for span in by_attempt.values():
        assert span.context is not None
        assert span.context.trace_id == ctx.trace_id
        assert span.parent is not None
        assert span.parent.span_id == ctx.span_id


# -- without the extra ----------------------------------------------------------------------------
_HIDDEN = """
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if the extra were not installed
from cronbus import App
from cronbus.observability import tracing
from cronbus.testing import run_until_idle_async

app = App(sys.argv[1])

@app.task(name="plain.add")
def add(a: int, b: int) -> int:
    return a + b

async def main() -> None:
    async with app:
        handle = await add.defer_async(2, 2)
        (run,) = await run_until_idle_async(app)
        assert run.result == 4, run
    assert tracing.ENABLED is False, tracing.ENABLED
    assert not [m for m in sys.modules if m.startswith("opentelemetry.")]
    print(handle.id)

asyncio.run(main())
"""


def test_a_process_without_opentelemetry_runs_untraced(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    done = subprocess.run(
        [sys.executable, "-c", _HIDDEN, f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    run_id = int(done.stdout.strip())
    conn = sqlite3.connect(db)
    try:
        (stored,) = conn.execute("SELECT trace FROM run_payloads WHERE run_id = ?", (run_id,))
    finally:
        conn.close()
    assert stored == (None,)
