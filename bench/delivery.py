"""The event bus: publishes per second, deliveries per second to a webhook, and the latency from
publish to the webhook's receipt (alone, and with a slow webhook on the same topic).

Processes: the benchmark publishes and reads; the dispatcher is a process of its own
(``bench/_dispatcher.py``) and so is the webhook receiver (``bench/_http.py``, a minimal
keep-alive HTTP/1.1 server that answers ``/slow*`` paths after ``--slow`` seconds and every
other path at once). So neither the publishing nor the receiving competes inside the
dispatcher's event loop; they do share the machine's cores.

Figures:

* ``publish one-at-a-time``: ``await app.publish_async(topic, type, data)`` in a loop, events/s.
* ``publish batches``: ``await app.publish_many_async(topic, events)`` with ``--batch`` events
  built with ``make_event`` per call (target: at least 20,000 events/s).
* ``deliveries/s``: ``--deliveries`` events are published first; then one webhook subscription
  (``start="earliest"``, ``max_in_flight=--max-in-flight``) is added and the dispatcher process
  started; the figure is acked deliveries / (last attempt's end - first attempt's start), read
  from the store's ``delivery_attempts`` table (target: at least 2,000/s). The settings also
  show the receiver's first-to-last arrival rate and the dispatcher process's CPU (% of one
  core, and milliseconds per delivery: the figure to watch on a busy machine).
* ``publish-to-delivery``: with the dispatcher idle, one event is published every ~20 ms
  (a random pause of ``--pause-min``-``--pause-max`` after each publish returns), and the
  latency is the receiver's arrival time minus the time just before the publish call (both
  ``time.time()`` on this machine); p50, p99 (target: under 25 ms) and max.
* ``fast with slow``: the same, after a second subscription on the same topic whose receiver
  answers after ``--slow`` seconds (1 s) has been added; ``fast p99 with slow / alone`` is the
  fast target's p99 now over its p99 alone (target: at most 2). With few samples a p99 is
  about the worst few, so take ``--samples`` 500 or more before reading much into the ratio.

Stores: by default each measurement gets a fresh SQLite file. With ``--store postgresql://...``
each measurement gets a fresh schema (the URL's ``schema`` with a random suffix), dropped after.

Example: ``.venv/bin/python bench/delivery.py --deliveries 20000 --samples 500``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from _app import app
from _common import (
    Figure,
    Stores,
    add_common_arguments,
    describe_store,
    exit_on_sigterm,
    heading,
    percentile,
    print_environment,
    print_table,
    report,
    report_group,
    sqlite_path,
)
from _dispatcher import DispatcherProcess
from _http import HttpProcess
from cronbus.events import make_event
from cronbus.events.states import DeliveryState

BENCH = "delivery"
PUBLISH_TARGET = 20_000.0
DELIVERY_TARGET = 2_000.0
LATENCY_TARGET_MS = 25.0
SLOW_FACTOR = 2.0
_SETTLE_SECONDS = 0.3
_POLL_SECONDS = 0.1


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# -- stores --------------------------------------------------------------------------------------
def _is_pg(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


@contextlib.contextmanager
def fresh_store(stores: Stores, tag: str) -> Iterator[str]:
    """A store URL for one measurement: a fresh SQLite file, or a fresh PostgreSQL schema
    (dropped after) when ``--store`` is a PostgreSQL URL."""
    url = stores.fresh(tag)
    if not _is_pg(url):
        yield url
        return
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    schema = f"{query.get('schema', 'cronbus')}_{uuid.uuid4().hex[:8]}"
    fresh = urlunsplit(parts._replace(query=urlencode({**query, "schema": schema})))
    try:
        yield fresh
    finally:
        _drop_schema(urlunsplit(parts._replace(query="")), schema)


def _drop_schema(server: str, schema: str) -> None:
    import psycopg  # only PostgreSQL runs need it
    from psycopg import sql

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


_WINDOW = (
    "SELECT min(a.started_at), max(a.finished_at), count(*), "
    "sum(CASE WHEN a.outcome = 'acked' THEN 1 ELSE 0 END) FROM delivery_attempts a "
    "JOIN deliveries d ON d.id = a.delivery_id "
    "JOIN subscriptions s ON s.id = d.subscription_id WHERE s.name = %s"
)


def attempt_window(url: str, subscription: str) -> tuple[float, float, int, int] | None:
    """First start, last end, attempts and acked attempts of a subscription's pushes, read from
    the store's tables (None when the store cannot be read this way)."""
    if _is_pg(url):
        import psycopg
        from psycopg import sql

        parts = urlsplit(url)
        schema = dict(parse_qsl(parts.query)).get("schema", "cronbus")
        with psycopg.connect(urlunsplit(parts._replace(query="")), autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            row = conn.execute(_WINDOW.encode(), (subscription,)).fetchone()
    else:
        import sqlite3

        path = sqlite_path(url)
        if path is None:
            return None
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
            row = conn.execute(_WINDOW.replace("%s", "?"), (subscription,)).fetchone()
    if row is None or row[0] is None:
        return None
    return float(row[0]), float(row[1]), int(row[2]), int(row[3] or 0)


# -- publishing ----------------------------------------------------------------------------------
async def _publish_single(url: str, n: int) -> float:
    topic = _unique("pub-single")
    app.use_store(url)
    async with app:
        start = time.perf_counter()
        for i in range(n):
            await app.publish_async(topic, "bench.ping", {"i": i})
        elapsed = time.perf_counter() - start
    return n / elapsed


async def _publish_batches(url: str, total: int, batch: int) -> float:
    topic = _unique("pub-batch")
    app.use_store(url)
    async with app:
        done = 0
        start = time.perf_counter()
        while done < total:
            size = min(batch, total - done)
            events = [make_event("bench.ping", {"i": done + i}) for i in range(size)]
            await app.publish_many_async(topic, events)
            done += size
        elapsed = time.perf_counter() - start
    return total / elapsed


async def _prepublish(topic: str, total: int, batch: int) -> None:
    done = 0
    while done < total:
        size = min(batch, total - done)
        events = [make_event("bench.ping", {"i": done + i}) for i in range(size)]
        await app.publish_many_async(topic, events)
        done += size


# -- deliveries per second -----------------------------------------------------------------------
async def _wait_acked(
    name: str, total: int, timeout: float, dispatcher: DispatcherProcess
) -> dict[DeliveryState, int]:
    """Poll the subscription's counts until ``total`` deliveries are acked."""
    deadline = time.monotonic() + timeout
    while True:
        counts = await app.subscriptions.counts(name)
        if counts.get(DeliveryState.ACKED, 0) >= total:
            return counts
        dispatcher.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: only {dict(counts)} after {timeout}s")
        await asyncio.sleep(_POLL_SECONDS)


async def _throughput(url: str, args: argparse.Namespace) -> dict[str, Any]:
    topic, name, path = _unique("thr"), _unique("thr-sub"), f"/{_unique('fast')}"
    app.use_store(url)
    with HttpProcess(slow=args.slow) as http:
        async with app:
            await _prepublish(topic, args.deliveries, args.batch)
            await app.subscriptions.add(
                name,
                topic=topic,
                webhook=http.url(path),
                start="earliest",
                max_in_flight=args.max_in_flight,
            )
            with DispatcherProcess(url, pool=args.pool, extra=args.dispatcher_arg) as disp:
                cpu_before, wall_before = disp.cpu_seconds(), time.perf_counter()
                counts = await _wait_acked(name, args.deliveries, args.timeout, disp)
                cpu = disp.cpu_seconds() - cpu_before
                wall = time.perf_counter() - wall_before
        arrivals = http.arrivals(path)
    window = attempt_window(url, name)
    if window is None:
        raise RuntimeError(f"no attempts recorded for {name}")
    first, last, attempts, acked = window
    times = [t for _, t in arrivals]
    ids = [i for i, _ in arrivals]
    return {
        "rate": acked / (last - first),
        "window_s": round(last - first, 3),
        "attempts": attempts,
        "acked": acked,
        "received": len(arrivals),
        "duplicates": len(ids) - len(set(ids)),
        "receiver_rate": round(len(times) / (max(times) - min(times))) if times else 0,
        "dispatcher_cpu_pct": round(100 * cpu / wall),
        "dispatcher_cpu_ms_per_delivery": round(1000 * cpu / max(1, attempts), 3),
        "not_acked": {k.value: v for k, v in counts.items() if k is not DeliveryState.ACKED},
    }


# -- latency -------------------------------------------------------------------------------------
async def _wait_held(names: list[str], timeout: float, dispatcher: DispatcherProcess) -> None:
    """Wait until the dispatcher holds the lease of every subscription in ``names``."""
    deadline = time.monotonic() + timeout
    while True:
        subs = {s.name: s for s in await app.subscriptions.list()}
        if all(subs[n].holder is not None for n in names):
            return
        dispatcher.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the dispatcher did not take {names} in {timeout}s")
        await asyncio.sleep(0.01)


async def _series(
    topic: str, http: HttpProcess, path: str, count: int, args: argparse.Namespace
) -> list[float]:
    """Publish ``count`` events one at a time; their publish-to-arrival latencies in ms."""
    rng = random.Random(args.seed)
    before: dict[str, float] = {}
    tag = uuid.uuid4().hex[:8]
    for i in range(count):
        await asyncio.sleep(rng.uniform(args.pause_min, args.pause_max))
        event_id = f"lat-{tag}-{i}"
        before[event_id] = time.time()
        await app.publish_async(topic, "bench.ping", {"i": i}, id=event_id)
    deadline = time.monotonic() + args.timeout
    while http.count(path) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: {http.count(path)} of {count} arrived")
        await asyncio.sleep(_POLL_SECONDS)
    first: dict[str, float] = {}
    for event_id, at in http.arrivals(path):
        first.setdefault(event_id, at)
    return [1000 * (first[i] - t) for i, t in before.items()]


async def _latency(url: str, args: argparse.Namespace) -> dict[str, Any]:
    topic, fast, slow = _unique("lat"), _unique("lat-fast"), _unique("lat-slow")
    fast_path, slow_path = f"/{_unique('fast')}", f"/{_unique('slow')}"
    count = args.warmup + args.samples
    app.use_store(url)
    out: dict[str, Any] = {}
    with HttpProcess(slow=args.slow) as http:
        async with app:
            options = {"max_in_flight": args.max_in_flight}
            await app.subscriptions.add(fast, topic=topic, webhook=http.url(fast_path), **options)
            with DispatcherProcess(url, pool=args.pool, extra=args.dispatcher_arg) as disp:
                await _wait_held([fast], 30, disp)
                await asyncio.sleep(_SETTLE_SECONDS)
                out["alone"] = (await _series(topic, http, fast_path, count, args))[args.warmup :]
                if args.slow > 0:
                    url_slow = http.url(slow_path)
                    await app.subscriptions.add(slow, topic=topic, webhook=url_slow, **options)
                    await _wait_held([fast, slow], 30, disp)
                    await asyncio.sleep(_SETTLE_SECONDS)
                    series = await _series(topic, http, fast_path, count, args)
                    out["with slow"] = series[args.warmup :]
                    out["slow_received"] = http.count(slow_path)
                    counts = await app.subscriptions.counts(slow)
                    out["slow_in_flight"] = counts.get(DeliveryState.IN_FLIGHT, 0)
    return out


# -- the command ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--single", type=int, default=2000, help="events published one at a time (2000)"
    )
    parser.add_argument(
        "--bulk", type=int, default=50_000, help="events published in batches (50000)"
    )
    parser.add_argument("--batch", type=int, default=1000, help="events per batch (1000)")
    parser.add_argument(
        "--deliveries", type=int, default=20_000, help="events pre-published and pushed (20000)"
    )
    parser.add_argument(
        "--max-in-flight", type=int, default=64, help="the subscriptions' max_in_flight (64)"
    )
    parser.add_argument("--pool", type=int, default=64, help="the dispatcher's pool (64)")
    parser.add_argument("--samples", type=int, default=500, help="latency samples (500)")
    parser.add_argument("--warmup", type=int, default=20, help="samples left out first (20)")
    parser.add_argument("--pause-min", type=float, default=0.015, help="pause between, s")
    parser.add_argument("--pause-max", type=float, default=0.025, help="pause between, s")
    parser.add_argument(
        "--slow", type=float, default=1.0, help="the slow target's answer time, s (0: skip it)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="give up a phase, s")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random pauses")
    parser.add_argument(
        "--dispatcher-arg",
        action="append",
        default=[],
        help="pass an option to bench/_dispatcher.py (e.g. --dispatcher-arg=--cprofile=/tmp/d)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["publish", "throughput", "latency"],
        help="leave out a part (repeatable)",
    )
    return parser


def _publish_figures(stores: Stores, args: argparse.Namespace, rep: int) -> list[Figure]:
    figures = []
    with fresh_store(stores, "pub-single") as url:
        rate = asyncio.run(_publish_single(url, args.single))
    settings = {"n": args.single, "store": describe_store(url), "repetition": rep}
    figures.append(report(Figure(BENCH, "publish one-at-a-time", rate, "events/s", settings)))
    with fresh_store(stores, "pub-batch") as url:
        rate = asyncio.run(_publish_batches(url, args.bulk, args.batch))
    settings = {
        "total": args.bulk,
        "batch": args.batch,
        "store": describe_store(url),
        "repetition": rep,
    }
    figures.append(
        report(Figure(BENCH, "publish batches", rate, "events/s", settings, target=PUBLISH_TARGET))
    )
    return figures


def _throughput_figure(stores: Stores, args: argparse.Namespace, rep: int) -> Figure:
    with fresh_store(stores, "deliveries") as url:
        result = asyncio.run(_throughput(url, args))
    rate = result.pop("rate")
    settings = {
        "events": args.deliveries,
        "max_in_flight": args.max_in_flight,
        "pool": args.pool,
        **result,
        "store": describe_store(url),
        "repetition": rep,
    }
    return report(
        Figure(BENCH, "deliveries/s", rate, "deliveries/s", settings, target=DELIVERY_TARGET)
    )


def _latency_figures(stores: Stores, args: argparse.Namespace, rep: int) -> list[Figure]:
    with fresh_store(stores, "latency") as url:
        result = asyncio.run(_latency(url, args))
    figures: list[Figure] = []
    alone_p99 = percentile(result["alone"], 99)
    for label, title in (("alone", "publish-to-delivery"), ("with slow", "fast with slow")):
        if label not in result:
            continue
        values = result[label]
        settings: dict[str, Any] = {
            "samples": len(values),
            "warmup": args.warmup,
            "pause_ms": f"{args.pause_min * 1000:g}-{args.pause_max * 1000:g}",
            "max_in_flight": args.max_in_flight,
            "store": describe_store(url),
            "repetition": rep,
            "min_ms": round(min(values), 3),
            "mean_ms": round(sum(values) / len(values), 3),
        }
        if label == "with slow":
            settings["slow_s"] = args.slow
            settings["slow_received"] = result["slow_received"]
            settings["slow_in_flight"] = result["slow_in_flight"]
        group = [
            Figure(
                BENCH,
                f"{title} {stat}",
                percentile(values, pct),
                "ms",
                settings,
                higher_is_better=False,
                target=LATENCY_TARGET_MS if label == "alone" and stat == "p99" else None,
            )
            for stat, pct in (("p50", 50.0), ("p99", 99.0), ("max", 100.0))
        ]
        figures.extend(report_group(title, group))
        if label == "with slow":
            # A ratio has a fixed target, so repetitions combine into a median like the rest.
            ratio = percentile(values, 99) / alone_p99
            extra = {"alone_p99_ms": round(alone_p99, 3), **settings}
            name = "fast p99 with slow / alone"
            figure = Figure(
                BENCH, name, ratio, "x", extra, higher_is_better=False, target=SLOW_FACTOR
            )
            figures.append(report(figure))
    return figures


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Run the measurements, print each figure, and return them."""
    args = build_parser().parse_args(argv)
    if environment:
        print_environment()
    figures: list[Figure] = []
    heading("delivery: publishing, pushing to webhooks, publish-to-delivery latency")
    with Stores(args.store) as stores:
        for rep in range(1, args.repeat + 1):
            if "publish" not in args.skip:
                figures.extend(_publish_figures(stores, args, rep))
            if "throughput" not in args.skip:
                figures.append(_throughput_figure(stores, args, rep))
            if "latency" not in args.skip:
                figures.extend(_latency_figures(stores, args, rep))
    return figures


if __name__ == "__main__":
    exit_on_sigterm()
    print_table(main())
