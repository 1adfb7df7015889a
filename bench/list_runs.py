"""List-runs latency over a large store: the first page and a page deep in the listing.

Seeds ``--runs`` runs (1,000,000 by default) with bulk SQL into a SQLite file and/or a
PostgreSQL schema (``--store sqlite|postgres|both``), then times one page of 50 runs, newest
first, through the service layer as the CLI and the HTTP API call it
(``Services(app).runs.list(RunQuery(...), limit=50, cursor=...)``: access check, validation,
the store's ``list_runs``, the page and its cursor), for each case:

| case | filter |
|---|---|
| `all` | every run of the namespace |
| `state=dead` | a rare state (about 3% of the runs) |
| `state=succeeded` | a common state (about 85%) |
| `task` | one task of 20 |
| `created since` | created in the seeding's last 10 seconds: 1,000 runs (first page only) |
| `created since, few` | created in its last 0.2 second: 18 runs, fewer than a page (first only) |

and each page: `first` (no cursor) and `deep` (the cursor of the run at 90% of the case's rows,
e.g. after 900,000 rows for `all` over 1,000,000 runs: a keyset, never an offset). Figures: p50
and p99 (linear interpolation) of ``--samples`` timed calls after ``--warmup`` untimed ones, in
milliseconds. Target: p99 under 50 ms, deep pages no slower than first ones.

The seeded runs: 90% in namespace ``default`` (the one listed), 10% in ``shop``; states
succeeded 85%, dead 3%, queued 4%, scheduled 4%, running 2%, cancelled 2%; 20 tasks, 5 queues;
each run has its payload row (with its namespace and creation time, as a defer writes it), and
ended runs an attempt. Seeding 1,000,000 runs takes a minute or
two per store, so this benchmark is not in ``run.py``'s default set; run it on its own:

    .venv/bin/python bench/list_runs.py                       # both stores, 1,000,000 runs
    .venv/bin/python bench/list_runs.py --runs 100000 --store sqlite
    .venv/bin/python bench/list_runs.py --explain             # also print each query's plan

``--reuse`` keeps an already seeded store (``--sqlite-path``, ``--pg-schema``) instead of seeding
it again.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from _common import Figure, exit_on_sigterm, heading, percentile, print_environment, print_table
from cronbus.app import App
from cronbus.services import Services
from cronbus.services.pages import encode_cursor
from cronbus.services.views import RunQuery
from cronbus.states import RunState
from cronbus.store import open_store

BENCH = "list_runs"
PG_SERVER = "postgresql://postgres@127.0.0.1:5432/test"
T0 = 1_700_000_000.0
LIMIT = 50
TARGET_MS = 50.0
# (state, share of runs in thousandths), cumulative bounds over `i % 1000`.
STATES = [
    ("succeeded", 850),
    ("dead", 30),
    ("queued", 40),
    ("scheduled", 40),
    ("running", 20),
    ("cancelled", 20),
]
CASES: dict[str, RunQuery] = {
    "all": RunQuery(),
    "state=dead": RunQuery(states=[RunState.DEAD]),
    "state=succeeded": RunQuery(states=[RunState.SUCCEEDED]),
    "task": RunQuery(task="task7"),
}


_ENDED_BELOW = STATES[0][1] + STATES[1][1]
"""States drawn below this bound (succeeded, dead) have ended; so have those from
``_ENDED_FROM`` (cancelled)."""
_ENDED_FROM = 1000 - STATES[-1][1]


def _state_sql(column: str) -> str:
    """A CASE expression giving each seeded run its state from ``column % 1000``."""
    parts, bound = [], 0
    for state, share in STATES:
        bound += share
        parts.append(f"WHEN {column} % 1000 < {bound} THEN '{state}'")
    return "CASE " + " ".join(parts) + " END"


def _seed_select(series: str, column: str) -> str:
    """The SELECT that builds every seeded run's row from a series of integers."""
    c = column
    return f"""
        SELECT 'task' || ({c} % 20), 'queue' || ({c} % 5), {_state_sql(f"({c} * 7)")},
            0, 0, {T0} + {c}, 1, 1,
            CASE WHEN {c} % 10 = 0 THEN 'shop' ELSE 'default' END,
            {T0} + {c} * 0.01, {T0} + {c} * 0.01,
            CASE WHEN ({c} * 7) % 1000 < {_ENDED_BELOW} OR ({c} * 7) % 1000 >= {_ENDED_FROM}
                 THEN {T0} + {c} * 0.01 + 1 END
        FROM {series}
    """


_INSERT_RUNS = """
INSERT INTO runs (task, queue, state, priority, lane, eta, attempts, max_attempts, namespace,
                  created_at, updated_at, finished_at)
"""


# -- seeding ---------------------------------------------------------------------------------------
async def _migrate(url: str) -> None:
    store = open_store(url)
    await store.open()
    await store.close()


def seed_sqlite(path: Path, runs: int) -> None:
    """Bulk insert ``runs`` runs, their payloads and the attempts of ended ones."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA synchronous = off")
        series = f"(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {runs}) SELECT i FROM s)"  # noqa: E501
        with conn:
            conn.execute(_INSERT_RUNS + _seed_select(series, "i"))
            conn.execute(
                "INSERT INTO run_payloads (run_id, args, kwargs, namespace, created_at) "
                "SELECT id, '[1, \"two\"]', '{\"k\": 3}', namespace, created_at FROM runs"
            )
            conn.execute(
                "INSERT INTO attempts (run_id, number, worker_id, started_at, finished_at, "
                "outcome, result) SELECT id, 1, 'w', created_at, finished_at, "
                "CASE state WHEN 'succeeded' THEN 'succeeded' ELSE 'failed' END, "
                "CASE state WHEN 'succeeded' THEN '42' END "
                "FROM runs WHERE finished_at IS NOT NULL"
            )
            conn.execute(
                "UPDATE runs SET attempt_id = "
                "(SELECT a.id FROM attempts a WHERE a.run_id = runs.id) "
                "WHERE finished_at IS NOT NULL"
            )
        conn.execute("ANALYZE")
    finally:
        conn.close()


def seed_postgres(schema: str, runs: int) -> None:
    """The same on PostgreSQL, then ANALYZE (as autovacuum would soon after such a load)."""
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{schema}"')
        conn.execute(
            (_INSERT_RUNS + _seed_select(f"generate_series(1, {runs}) AS s(i)", "i")).encode()
        )
        conn.execute(
            b"INSERT INTO run_payloads (run_id, args, kwargs, namespace, created_at) "
            b"SELECT id, '[1, \"two\"]', '{\"k\": 3}', namespace, created_at FROM runs"
        )
        conn.execute(
            b"INSERT INTO attempts (run_id, number, worker_id, started_at, finished_at, outcome, "
            b"result) SELECT id, 1, 'w', created_at, finished_at, "
            b"CASE state WHEN 'succeeded' THEN 'succeeded' ELSE 'failed' END, "
            b"CASE state WHEN 'succeeded' THEN '42' END FROM runs WHERE finished_at IS NOT NULL"
        )
        conn.execute(b"UPDATE runs r SET attempt_id = a.id FROM attempts a WHERE a.run_id = r.id")
        conn.execute(b"VACUUM ANALYZE runs")
        conn.execute(b"VACUUM ANALYZE run_payloads")
        conn.execute(b"VACUUM ANALYZE attempts")


def prepare(store: str, runs: int, args: argparse.Namespace) -> str:
    """The URL of a store holding ``runs`` seeded runs (seeded now unless ``--reuse`` finds
    it done)."""
    if store == "sqlite":
        path = Path(args.sqlite_path or Path(tempfile.gettempdir()) / "cronbus-list-runs.db")
        url = f"sqlite:///{path}"
        if args.reuse and path.exists() and _count_sqlite(path) == runs:
            return url
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        asyncio.run(_migrate(url))
        started = time.perf_counter()
        seed_sqlite(path, runs)
    else:
        schema = args.pg_schema
        url = f"{PG_SERVER}?schema={schema}"
        if args.reuse and _count_postgres(schema) == runs:
            return url
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
        asyncio.run(_migrate(url))
        started = time.perf_counter()
        seed_postgres(schema, runs)
    print(f"seeded {runs:,} runs into {store} in {time.perf_counter() - started:.1f} s", flush=True)
    return url


def _count_sqlite(path: Path) -> int:
    try:
        with sqlite3.connect(path) as conn:
            return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])
    except sqlite3.Error:
        return -1


def _count_postgres(schema: str) -> int:
    try:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{schema}"'.encode())
            row = conn.execute(b"SELECT count(*) FROM runs").fetchone()
            return int(row[0]) if row else -1
    except psycopg.Error:
        return -1


# -- measuring -------------------------------------------------------------------------------------
FEW = "created since, few"


def windows(runs: int) -> dict[str, RunQuery]:
    """The cases with a creation time, by the seeding's times (run i is created at
    ``T0 + i / 100``)."""
    end = T0 + runs * 0.01
    return {
        "created since": RunQuery(created_after=end - 10.0),
        FEW: RunQuery(created_after=end - 0.2),
    }


async def deep_cursor(store_kind: str, url: str, query: RunQuery) -> str:
    """The cursor after the run at 90% of the case's rows (found once, by an offset scan that
    is not timed), so the deep page is read by keyset as a client paging that far would."""
    where = ["namespace = 'default'"]
    if query.states:
        where.append(f"state = '{query.states[0].value}'")
    if query.task:
        where.append(f"task = '{query.task}'")
    count_sql = f"SELECT count(*) FROM runs WHERE {' AND '.join(where)}"
    if store_kind == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            (count,) = conn.execute(count_sql).fetchone()
            offset = int(count * 0.9)
            (run_id,) = conn.execute(
                f"SELECT id FROM runs WHERE {' AND '.join(where)} ORDER BY id DESC "
                f"LIMIT 1 OFFSET {offset}"
            ).fetchone()
    else:
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{url.rsplit("=", 1)[1]}"'.encode())
            row = conn.execute(count_sql.encode()).fetchone()
            assert row is not None
            offset = int(row[0] * 0.9)
            found = conn.execute(
                f"SELECT id FROM runs WHERE {' AND '.join(where)} ORDER BY id DESC "
                f"LIMIT 1 OFFSET {offset}".encode()
            ).fetchone()
            assert found is not None
            run_id = found[0]
    return encode_cursor({"b": int(run_id)})


async def time_pages(
    services: Services,
    query: RunQuery,
    cursor: str | None,
    args: argparse.Namespace,
    full: bool = True,
) -> list[float]:
    """Milliseconds of each timed call of one page (which must be full, unless told)."""
    times = []
    samples, warmup = args.samples, args.warmup
    for index in range(warmup + samples):
        started = time.perf_counter()
        page = await services.runs.list(query, limit=LIMIT, cursor=cursor)
        elapsed = (time.perf_counter() - started) * 1000
        if (full and len(page.items) != LIMIT) or not page.items:
            raise SystemExit(f"a page held {len(page.items)} runs, not {LIMIT}")
        if index >= warmup:
            times.append(elapsed)
    return times


async def measure(store_kind: str, url: str, args: argparse.Namespace) -> list[Figure]:
    """Every case and page of one store."""
    heading(f"{store_kind}: {args.runs:,} runs")
    app = App(url, namespace="default")
    await app.open_async(create=False)
    figures = []
    try:
        services = Services(app)
        for name, query in {**CASES, **windows(args.runs)}.items():
            pages: list[tuple[str, str | None]] = [("first", None)]
            if query.created_after is None:
                pages.append(("deep", await deep_cursor(store_kind, url, query)))
            for page, cursor in pages:
                full = name != FEW
                times = await time_pages(services, query, cursor, args, full)
                settings = {
                    "store": store_kind,
                    "runs": args.runs,
                    "limit": LIMIT,
                    "samples": len(times),
                    "max_ms": round(max(times), 2),
                }
                for pct in (50, 99):
                    figure = Figure(
                        BENCH,
                        f"{store_kind} {name} {page} p{pct}",
                        percentile(times, pct),
                        "ms",
                        settings,
                        higher_is_better=False,
                        target=TARGET_MS if pct == 99 else None,
                    )
                    figures.append(figure)
                print(
                    f"[{BENCH}] {store_kind} {name:<16} {page:<5}  "
                    f"p50 {percentile(times, 50):6.2f} ms  p99 {percentile(times, 99):6.2f} ms  "
                    f"max {max(times):6.2f} ms",
                    flush=True,
                )
                if args.explain:
                    await explain(app, store_kind, query, cursor)
    finally:
        await app.close_async()
    return figures


async def explain(app: App, store_kind: str, query: RunQuery, cursor: str | None) -> None:
    """Print the plan of the store's listing statement for this case and page."""
    from cronbus.model import RunFilter
    from cronbus.services.pages import decode_cursor

    before = None if cursor is None else decode_cursor(cursor, {"b": int})["b"]
    wanted = RunFilter(
        states=query.states,
        task=query.task,
        created_after=query.created_after,
        limit=LIMIT + 1,
        before_id=before,
        namespace="default",
    )
    if store_kind == "sqlite":
        from cronbus.store.sqlite import listing as sl

        class Recorder:
            def __init__(self, conn: sqlite3.Connection) -> None:
                self.conn = conn

            def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
                for row in self.conn.execute("EXPLAIN QUERY PLAN " + sql, params):
                    print(f"      {row[-1]}")
                return self.conn.execute(sql, params)

        with sqlite3.connect(app.store.url.removeprefix("sqlite:///").split("?")[0]) as conn:
            sl.list_runs(Recorder(conn), wanted)  # type: ignore[arg-type]
    else:
        from cronbus.store.postgres import listing as pl

        sql, params = pl.listing_query(wanted, ["default"])
        schema = app.store.url.rsplit("=", 1)[1]
        with psycopg.connect(PG_SERVER, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{schema}"'.encode())
            for (line,) in conn.execute(("EXPLAIN (ANALYZE, BUFFERS) " + sql).encode(), params):
                print(f"      {line}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000_000, help="runs to seed (1,000,000)")
    parser.add_argument(
        "--store", choices=("sqlite", "postgres", "both"), default="both", help="default both"
    )
    parser.add_argument("--samples", type=int, default=200, help="timed calls per page (200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls first (20)")
    parser.add_argument("--reuse", action="store_true", help="keep a store already seeded")
    parser.add_argument("--sqlite-path", help="the SQLite file (default: in the temp dir)")
    parser.add_argument("--pg-schema", default="bench_list_runs", help="the PostgreSQL schema")
    parser.add_argument("--explain", action="store_true", help="print each query's plan")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    print_environment()
    kinds = ("sqlite", "postgres") if args.store == "both" else (args.store,)
    figures: list[Figure] = []
    for kind in kinds:
        url = prepare(kind, args.runs, args)
        figures.extend(asyncio.run(measure(kind, url, args)))
    heading("summary")
    print_table(figures)


if __name__ == "__main__":
    main()
