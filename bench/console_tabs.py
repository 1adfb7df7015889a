"""Console tabs: database statements per minute caused by open web-console tabs, 1 then 20.

Issue 12's figure: twenty open console tabs should cost the database what one tab costs (the
overview's snapshot is computed once per tick for every tab of a namespace, and pages share
cached reads).

Setting: a ``cronbus api`` subprocess on a fresh PostgreSQL schema (dropped after), reaching
the server through a counting relay in this process: a loopback TCP proxy that reads the
PostgreSQL protocol the API sends and counts its statements (each simple ``Query`` and each
extended-protocol ``Execute``; ``BEGIN``/``COMMIT``/``ROLLBACK``/savepoints are counted apart
as transaction control). The count is exact and nothing else on the server adds to it (the
server's ``pg_stat_statements`` is not preloaded here, and ``pg_stat_database`` counts every
client of the database). A trickle of runs keeps the overview changing as in use: every
``--trickle`` seconds (2) this process defers a run and ends it (succeeded), straight on the
server, not through the relay, so a tab's live parts fetch themselves again now and then.

Phases: no tab (the API's own idle work), then ``--tabs`` (1, then 20) Chromium pages in one
browser context, logged in through the form (a session cookie), each on ``/`` (the overview: one
live stream per page). After the pages show ``live`` and ``--settle`` (5) seconds pass,
statements are counted over ``--seconds`` (60; ``--quick``: 5). Figures: statements per minute
for each phase, the 20-tab figure's target being the 1-tab figure (+10%). The most frequent
statements of the last phase are printed, to see what tabs still cost.

Example: ``.venv/bin/python bench/console_tabs.py`` (``--quick``: 5 s per phase)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from _common import (
    PG_SERVER,
    Figure,
    exit_on_sigterm,
    heading,
    print_environment,
    print_table,
    report,
)
from cronbus import App
from cronbus.model import ClaimRequest, Outcome, QueueShare
from cronbus.services import Services
from cronbus.states import AttemptOutcome

if TYPE_CHECKING:
    from playwright.async_api import Browser

BENCH = "console_tabs"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TRICKLE_QUEUE = "bench-trickle"
TARGET_MARGIN = 1.10
"""20 tabs may cost at most this much more than 1 tab (``the same``, give or take a tick)."""
_CONTROL = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|START TRANSACTION)\b", re.I)
_SSL_REQUESTS = (80877103, 80877104)  # SSLRequest, GSSENCRequest: answered with one byte

app = App()


@app.task(name="bench.console.noop")
def noop() -> None:
    """The trickle's run (ended by the benchmark itself, no worker runs it)."""


# -- the counting relay ----------------------------------------------------------------------------
@dataclass
class Counts:
    """Statements seen by the relay, over every connection."""

    statements: int = 0
    control: int = 0
    texts: collections.Counter[str] = field(default_factory=collections.Counter)

    def snapshot(self) -> tuple[int, int, collections.Counter[str]]:
        """The counts so far (a copy)."""
        return self.statements, self.control, collections.Counter(self.texts)


class _Frontend:
    """Reads one connection's client-to-server bytes as PostgreSQL messages and counts the
    statements they run."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.buffer = bytearray()
        self.started = False
        self.statements: dict[bytes, str] = {}  # prepared statement name -> its text
        self.portals: dict[bytes, str] = {}  # portal name -> its statement's text

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return
                length = int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) < length:
                    return
                code = int.from_bytes(self.buffer[4:8], "big")
                self.started = code not in _SSL_REQUESTS
                del self.buffer[:length]
                continue
            if len(self.buffer) < 5:
                return
            length = int.from_bytes(self.buffer[1:5], "big")
            if len(self.buffer) < 1 + length:
                return
            kind, body = self.buffer[0:1], bytes(self.buffer[5 : 1 + length])
            del self.buffer[: 1 + length]
            self._message(kind, body)

    def _message(self, kind: bytes, body: bytes) -> None:
        if kind == b"Q":
            self._count(body.split(b"\0", 1)[0].decode(errors="replace"))
        elif kind == b"P":
            name, rest = body.split(b"\0", 1)
            self.statements[name] = rest.split(b"\0", 1)[0].decode(errors="replace")
        elif kind == b"B":
            portal, statement, _ = body.split(b"\0", 2)
            self.portals[portal] = self.statements.get(statement, "?")
        elif kind == b"E":
            self._count(self.portals.get(body.split(b"\0", 1)[0], "?"))

    def _count(self, text: str) -> None:
        if _CONTROL.match(text):
            self.counts.control += 1
            return
        self.counts.statements += 1
        self.counts.texts[" ".join(text.split())[:110]] += 1


@contextlib.asynccontextmanager
async def relay(host: str, port: int, counts: Counts) -> AsyncIterator[int]:
    """A loopback proxy to ``host:port`` counting what clients send; yields its port."""
    tasks: set[asyncio.Task[None]] = set()

    async def pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frontend: _Frontend | None
    ) -> None:
        try:
            while data := await reader.read(65536):
                if frontend is not None:
                    frontend.feed(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(host, port)
        both = [
            asyncio.create_task(pipe(client_r, server_w, _Frontend(counts))),
            asyncio.create_task(pipe(server_r, client_w, None)),
        ]
        tasks.update(both)
        await asyncio.gather(*both, return_exceptions=True)
        tasks.difference_update(both)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# -- store, API process, trickle -------------------------------------------------------------------
def _with_options(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit(parts._replace(query=urlencode({**query, **options}, quote_via=quote)))


@contextlib.contextmanager
def fresh_schema(server: str) -> Iterator[str]:
    """A store URL on a new schema of ``server``, dropped afterwards."""
    import psycopg
    from psycopg import sql

    schema = f"bench_tabs_{uuid.uuid4().hex[:10]}"
    base = urlunsplit(urlsplit(server)._replace(query=""))
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield _with_options(server, schema=schema)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _through(url: str, port: int) -> str:
    """``url`` reaching the server through the relay on ``port``, in clear text (the relay
    reads the protocol)."""
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    moved = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))
    return _with_options(moved, sslmode="disable", gssencmode="disable")


@contextlib.asynccontextmanager
async def api_process(store: str) -> AsyncIterator[tuple[subprocess.Popen[str], str]]:
    """``cronbus api`` on ``store`` and a free port; yields it and its base URL. (Its line is
    read off the event loop: the relay the API connects through runs on it.)"""
    command = [sys.executable, "-m", "cronbus", "api", "--store", store, "--port", "0"]
    command += ["--log-level", "warning"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)  # noqa: ASYNC220
    try:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        found = re.search(r"listening on (http://\S+)", line)
        if not found:
            raise RuntimeError(f"cronbus api did not start (exit {proc.poll()}): {line!r}")
        yield proc, found[1]
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def trickle(store: App, every: float) -> None:
    """Defer a run and end it, every ``every`` seconds, as a worker would (until cancelled)."""
    services = Services(store)
    while True:
        await services.runs.defer("bench.console.noop", queue=TRICKLE_QUEUE)
        request = ClaimRequest(
            worker_id="bench-console",
            queues=[QueueShare(name=TRICKLE_QUEUE, limit=1)],
            limit=1,
            lease_seconds=60.0,
        )
        now = store.clock.now()
        for claimed in await store.store.claim(request, now):
            ended = Outcome(
                run_id=claimed.run_id,
                attempt_id=claimed.attempt_id,
                outcome=AttemptOutcome.SUCCEEDED,
                fence=claimed.fence,
            )
            await store.store.complete([ended], store.clock.now())
        await asyncio.sleep(every)


# -- the phases ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Phase:
    """What one phase counted."""

    tabs: int
    seconds: float
    statements: int
    control: int
    visible: int
    top: list[tuple[str, int]]

    @property
    def per_minute(self) -> float:
        """Statements per minute."""
        return self.statements * 60.0 / self.seconds


async def measure(
    browser: Browser, base: str, token: str, counts: Counts, tabs: int, args: argparse.Namespace
) -> Phase:
    """Open ``tabs`` pages on the overview, let them settle, count over ``--seconds``."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        # Logged in through the form: the context's request API shares its cookie jar, so
        # every page carries the session's cookie, as after a person's login.
        login = await context.request.post(
            base + "/login", form={"token": token, "next": "/"}, max_redirects=0
        )
        assert login.status == 303, login.status
        pages = []
        for _ in range(tabs):
            page = await context.new_page()
            await page.goto(base + "/")
            pages.append(page)
        for page in pages:
            await page.wait_for_function(
                "document.querySelector('[data-live-state]')?.textContent === 'live'",
                timeout=30_000,
            )
        visible = 0
        for page in pages:
            visible += await page.evaluate("document.visibilityState === 'visible'")
        await asyncio.sleep(args.settle)
        before = counts.snapshot()
        began = time.monotonic()
        await asyncio.sleep(args.seconds)
        after = counts.snapshot()
        seconds = time.monotonic() - began
    finally:
        await context.close()
    texts = after[2] - before[2]
    return Phase(
        tabs=tabs,
        seconds=seconds,
        statements=after[0] - before[0],
        control=after[1] - before[1],
        visible=visible,
        top=texts.most_common(6),
    )


async def run(args: argparse.Namespace) -> list[Phase]:
    """Every phase on a fresh schema, the API reaching it through the relay."""
    with fresh_schema(args.store) as url:
        app.use_store(url)
        async with app:
            _, token = await Services(app).tokens.create(
                name="bench-console", scope=args.scope, namespaces=[args.namespaces]
            )
            counts = Counts()
            server = urlsplit(url)
            host, port = server.hostname or "127.0.0.1", server.port or 5432
            async with (
                relay(host, port, counts) as relayed,
                trickling(app, args.trickle),
                api_process(_through(url, relayed)) as (proc, base),
            ):
                return await phases(proc, base, token, counts, args)


@contextlib.asynccontextmanager
async def trickling(store: App, every: float) -> AsyncIterator[None]:
    """:func:`trickle` in the background while the block runs."""
    task = asyncio.create_task(trickle(store, every))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def phases(
    proc: subprocess.Popen[str], base: str, token: str, counts: Counts, args: argparse.Namespace
) -> list[Phase]:
    """No tab, then each of ``--tabs``, in one Chromium."""
    from playwright.async_api import async_playwright

    found = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for tabs in [0, *args.tabs]:
                found.append(await measure(browser, base, token, counts, tabs, args))
                print(
                    f"{tabs} tabs: {found[-1].statements} statements in {found[-1].seconds:.0f} s",
                    flush=True,
                )
                if proc.poll() is not None:
                    raise RuntimeError(f"cronbus api exited with code {proc.poll()}")
        finally:
            await browser.close()
    return found


def _tabs(text: str) -> list[int]:
    try:
        found = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"tab counts like 1,20, not {text!r}") from None
    if not found or any(n < 1 or n > 50 for n in found):
        raise argparse.ArgumentTypeError("each tab count must be from 1 to 50")
    return found


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--store",
        default=PG_SERVER,
        help=f"the PostgreSQL server (a postgresql:// URL; default {PG_SERVER}, CRONBUS_TEST_PG);"
        " a fresh schema is made on it and dropped after",
    )
    parser.add_argument(
        "--scope", choices=["read", "write", "admin"], default="admin", help="token scope (admin)"
    )
    parser.add_argument(
        "--namespaces", default="*", help="the token's namespace: * (default) or default"
    )
    parser.add_argument("--tabs", type=_tabs, default=[1, 20], help="tab counts (1,20)")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds counted per phase")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before counting (5)")
    parser.add_argument("--trickle", type=float, default=2.0, help="seconds between runs (2)")
    parser.add_argument("--repeat", type=int, default=1, help="repetitions (default 1)")
    parser.add_argument("--quick", action="store_true", help="5 s per phase, for a smoke test")
    return parser


def main(argv: Sequence[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the phases, print each figure, and return them."""
    args = build_parser().parse_args(argv)
    if not args.store.startswith(("postgresql://", "postgres://")):
        raise SystemExit(
            "--store: console_tabs counts PostgreSQL statements: give a postgresql:// server URL"
        )
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"console_tabs needs Chromium at {CHROMIUM}")
    if args.quick:
        args.seconds = 5.0
        args.settle = 2.0
    if environment:
        print_environment()
    heading("console tabs: database statements per minute with console tabs open")
    settings = {
        "seconds": args.seconds,
        "trickle_s": args.trickle,
        "token": f"{args.scope}:{args.namespaces}",
        "store": "postgres",
    }
    figures: list[Figure] = []
    for _ in range(args.repeat):
        measured = asyncio.run(run(args))
        one = next((p.per_minute for p in measured if p.tabs == 1), None)
        for phase in measured:
            target = None
            if phase.tabs > 1 and one is not None:
                target = max(one * TARGET_MARGIN, one + 1.0)
            figures.append(
                report(
                    Figure(
                        BENCH,
                        f"statements/min, {phase.tabs} tab{'s' if phase.tabs != 1 else ''}",
                        phase.per_minute,
                        "/min",
                        {**settings, "tabs": phase.tabs, "visible": phase.visible},
                        higher_is_better=False,
                        target=target,
                    )
                )
            )
        last = measured[-1]
        print(
            f"transaction control per minute, {last.tabs} tabs: "
            f"{last.control * 60.0 / last.seconds:.0f}"
        )
        print(f"most frequent statements with {last.tabs} tabs (count over {last.seconds:.0f} s):")
        for text, count in last.top:
            print(f"  {count:6d}  {text}")
        shown = ", ".join(
            f"{p.tabs} tab{'s' if p.tabs != 1 else ''}: {p.per_minute:.0f}" for p in measured
        )
        print(f"queries/min {shown}", flush=True)
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main(sys.argv[1:]))
