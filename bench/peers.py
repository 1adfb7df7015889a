"""cronbus beside the Python queues people use (Huey, Dramatiq), with a real task body (issue 15).

Systems (``--only``, one at a time, in this order): ``sqlite`` and ``postgres`` (cronbus on a
fresh SQLite file / a fresh PostgreSQL schema per measurement, workers started as
``cronbus worker --app _peers_cronbus:app --concurrency 8 --no-connectors``), ``huey``
(``RedisHuey``; ``huey_consumer -k thread -w 8 -q`` per process) and ``dramatiq``
(``RedisBroker``; ``dramatiq --processes 2 --threads 8``). Every body is the same
(``bench/_peers_common.py``): one synchronous round trip to Redis through redis-py, a client per
process. Redis is the local server, database 15 (``PEERS_REDIS_URL``), emptied before and after
each measurement; nothing else of Redis is touched.

Figures (``--figures``, by group):

* ``processed``: ``--runs`` (10,000) runs deferred in bulk (batches of 1,000) before the
  workers start; ``--workers`` (2) processes x ``--threads`` (8) slots; each is released
  when all have done their imports (a Redis gate), and the rate is runs / (last body - first
  body), both stamped by Redis itself (``TIME`` in the body's script), so neither the
  benchmark's polling nor a queue's own tables are in the figure. Beside it: the workers' CPU
  seconds per 10,000 runs, and the local servers' (Redis, and PostgreSQL where it is the
  store: every process of that name, ended backends included), per 10,000 runs and as a share
  of the machine's CPUs over the drain.
* ``async``: the same for cronbus with an async body (``redis.asyncio``).
* ``defers``, no worker running: one call each from one caller (``--single``, 2,000; the
  blocking API of each: ``task.defer()``, ``task()``, ``actor.send()``); in batches of 1,000
  (``--batch-total``, 10,000: cronbus ``defer_many``; Huey ``task.map`` and Dramatiq
  ``group(...).run()``, which enqueue one message per call: neither has a bulk form); and from
  ``--callers`` (16) concurrent callers, one call at a time each (``--per-caller``, 250):
  threads for every system, and for cronbus also asyncio tasks (``defer_async`` on the app's
  loop). A cronbus defer returns once its run is committed (durable); a Redis queue's once
  Redis has it in memory (this Redis keeps nothing on disk).
* ``idle``: one worker process (8 slots), idle; ``--idle`` (300) runs deferred
  ``--gap`` (10 ms) apart without waiting; latency = the body's ``time.time()`` at its start
  - ``time.time()`` just before the defer call (carried in the arguments). p50 and p99.
* ``delayed``: the same worker; ``--delayed`` (200) runs deferred at once, due ``--ahead``
  (2 s) ahead and spread over ``--spread`` (2 s); lateness = start - due time. cronbus
  ``eta=``, Huey ``schedule(delay=)``, Dramatiq ``send_with_options(delay=ms)``.
* ``wait`` (cronbus only): the same worker; ``--waits`` (100) runs deferred one at a time and
  waited for with ``handle.wait()``; wait-to-return = ``time.time()`` when ``wait`` returned
  - the run's ``finished_at`` as stored. p50 and p99.

Before the latency series, ``--warmup`` (5) runs are deferred and waited for one at a time
(left out). The last table gives each figure for every system, the ratio cronbus / best peer
(for times, lower is better), and the targets of issue 15 met or not. With ``--repeat N``
every figure is the median of N rounds (each round runs every system in turn).

``--profile DIR`` records every cronbus worker of the processed measurements with py-spy
(``pip install py-spy``; raw collapsed stacks in DIR; ``--profile-gil``: only the thread
holding the GIL) and prints the top functions by own and total samples (``--workers 1
--only sqlite --figures processed`` for one worker draining).

Example: ``.venv/bin/python bench/peers.py --repeat 3`` (``--quick``: small sizes, ~40 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

import _peers_common as common
from _common import (
    BENCH_DIR,
    PG_SERVER,
    Figure,
    exit_on_sigterm,
    format_value,
    fresh_pg_schema,
    heading,
    percentile,
    print_environment,
    store_choices,
    worker_env,
)

BENCH = "peers"
SYSTEMS = ("sqlite", "postgres", "huey", "dramatiq")
LABELS = {
    "sqlite": "cronbus SQLite",
    "postgres": "cronbus PostgreSQL",
    "huey": "Huey",
    "dramatiq": "Dramatiq",
}
PEERS = ("huey", "dramatiq")
GROUPS = ("processed", "async", "defers", "idle", "delayed", "wait")
BATCH = 1000
_WRAP = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: die with the benchmark\n"
    "if os.getppid() != int(os.environ['PEERS_PARENT']):\n"
    "    sys.exit('peers: the benchmark is gone')\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


@dataclass(frozen=True)
class Kind:
    """One figure of the table."""

    title: str
    unit: str
    higher_is_better: bool
    group: str


KINDS: dict[str, Kind] = {
    "processed": Kind("processed runs/s, sync redis-py body", "runs/s", True, "processed"),
    "processed-async": Kind("processed runs/s, async redis.asyncio body", "runs/s", True, "async"),
    "defer-single": Kind("defers/s, one call each, one caller", "defers/s", True, "defers"),
    "defer-batch": Kind("defers/s in batches of 1,000", "defers/s", True, "defers"),
    "defer-threads": Kind("defers/s, 16 concurrent callers (threads)", "defers/s", True, "defers"),
    "defer-tasks": Kind("defers/s, 16 concurrent callers (asyncio)", "defers/s", True, "defers"),
    "idle-p50": Kind("idle defer -> start p50, other process", "ms", False, "idle"),
    "idle-p99": Kind("idle defer -> start p99, other process", "ms", False, "idle"),
    "delayed-p50": Kind("delayed run lateness p50", "ms", False, "delayed"),
    "delayed-p99": Kind("delayed run lateness p99", "ms", False, "delayed"),
    "wait-p50": Kind("handle.wait() return after completion p50", "ms", False, "wait"),
    "wait-p99": Kind("handle.wait() return after completion p99", "ms", False, "wait"),
}


# -- processes -----------------------------------------------------------------------------------
class Processes:
    """Worker processes of one system: each in a session of its own (so Ctrl-C reaches only the
    benchmark, which stops them), dying with the benchmark (``PR_SET_PDEATHSIG``), stopped on
    exit with SIGTERM to its process group, then SIGKILL after ``stop_timeout``."""

    def __init__(
        self,
        commands: Sequence[Sequence[str]],
        *,
        gated: int,
        conn: redis.Redis,
        log_dir: Path,
        stop_timeout: float = 20.0,
    ) -> None:
        self.commands = [list(c) for c in commands]
        self.gated = gated
        """How many processes import an app module (each passes the gate once)."""
        self.conn = conn
        self.log_dir = log_dir
        self.stop_timeout = stop_timeout
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.spies: list[tuple[subprocess.Popen[bytes], Path]] = []

    @property
    def pids(self) -> list[int]:
        """Process ids of the processes started (their session leaders)."""
        return [p.pid for p in self.procs]

    def cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by every process of these processes' groups
        (Dramatiq's worker children included), from ``/proc``; NaN where there is no /proc."""
        groups, stats = set(self.pids), _proc_stats()
        if stats is None:
            return float("nan")
        # pgrp is field 5 of stat; utime and stime are fields 14 and 15.
        total = sum(int(f[11]) + int(f[12]) for _, f in stats if int(f[2]) in groups)
        return total / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> Processes:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Launch every process (gated: each waits for :meth:`release` after its imports)."""
        env = {**worker_env(), common.GATE_ENV: "1", "PEERS_PARENT": str(os.getpid())}
        env["PEERS_REDIS_URL"] = common.REDIS_URL
        for command in self.commands:
            log = self.log_dir / f"worker-{len(self.procs)}-{uuid.uuid4().hex[:6]}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-c", _WRAP, *command],
                    env=env,
                    cwd=BENCH_DIR,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.procs.append(proc)
            self.logs.append(log)

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until every gated process has done its imports."""
        deadline = time.monotonic() + timeout
        while int(self.conn.llen(common.READY_KEY)) < self.gated:
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker processes not ready after {timeout}s{self._tails()}")
            time.sleep(0.02)

    def release(self) -> None:
        """Let every gated process go on at once."""
        self.conn.delete(common.READY_KEY)
        self.conn.rpush(common.GO_KEY, *["go"] * self.gated)

    def spy(self, folder: Path, tag: str, *, gil: bool) -> None:
        """Attach py-spy (raw collapsed stacks, non-blocking) to each process; with ``gil``,
        only samples of the thread holding the GIL."""
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        for index, pid in enumerate(self.pids):
            out = folder / f"{tag}-worker{index}.txt"
            command = [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "200"]
            command += ["--nonblocking", "--output", str(out), *(["--gil"] if gil else [])]
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.spies.append((proc, out))
        time.sleep(1.0)  # py-spy attaches

    def check_alive(self) -> None:
        """Raise if a process has exited."""
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"worker process {proc.pid} exited early with code {proc.returncode}"
                    + self._tails()
                )

    def _tails(self) -> str:
        parts = []
        for log in self.logs:
            with contextlib.suppress(OSError):
                text = log.read_text(errors="replace").strip()
                if text:
                    parts.append(f"\n--- {log.name} ---\n{text[-2000:]}")
        return "".join(parts)

    def stop(self) -> None:
        """SIGTERM each process group, wait, SIGKILL what is left; py-spy ends with them."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"worker {proc.pid} ignored SIGTERM; killing it", file=sys.stderr)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # What the process left behind in its group (Dramatiq's workers, if their parent
            # went first).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs = []
        for spy, _ in self.spies:
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
            if spy.stderr is not None:
                spy.stderr.close()


# -- the systems ---------------------------------------------------------------------------------
class System:
    """What the measurements need of one system."""

    key = ""
    label = ""
    cronbus = False

    def __init__(self, conn: redis.Redis, log_dir: Path) -> None:
        self.conn = conn
        self.log_dir = log_dir

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """A clean slate for one measurement (Redis database emptied before and after)."""
        flush(self.conn)
        try:
            yield
        finally:
            flush(self.conn)

    def defer_hit(self) -> None:
        """Defer one run of the processed-runs body (the sync one)."""
        raise NotImplementedError

    def defer_hits(self, count: int, *, asynchronous: bool = False) -> None:
        """Defer ``count`` runs of the body at once (the system's bulk form, or its loop)."""
        raise NotImplementedError

    def defer_stamp(self, key: str, t0: float, due: float | None = None) -> None:
        """Defer one run of the latency body (due at ``due`` if given)."""
        raise NotImplementedError

    def workers(self, processes: int, threads: int) -> Processes:
        """The worker processes, gated."""
        raise NotImplementedError

    def defer_tasks(self, callers: int, per_caller: int) -> float:
        """cronbus only: seconds for ``callers`` asyncio tasks each deferring ``per_caller``."""
        raise NotImplementedError

    def wait_sample(self, key: str) -> float:
        """cronbus only: one ``handle.wait()`` sample, seconds after the run's completion."""
        raise NotImplementedError


class Cronbus(System):
    """cronbus on SQLite or PostgreSQL: the benchmark's app is open on the session's store."""

    cronbus = True

    def __init__(self, conn: redis.Redis, log_dir: Path, kind: str, server: str) -> None:
        super().__init__(conn, log_dir)
        import _peers_cronbus  # the app (imports cronbus)

        self.mod = _peers_cronbus
        self.key = kind
        self.label = LABELS[kind]
        self.server = server
        self.url = ""

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """A fresh store (SQLite file or PostgreSQL schema), opened with ``with app``."""
        with super().session(), fresh_store(self.key, self.server, self.log_dir) as url:
            self.url = url
            app = self.mod.app
            app.use_store(url)
            with app:
                yield

    def defer_hit(self) -> None:
        self.mod.hit.defer()

    def defer_hits(self, count: int, *, asynchronous: bool = False) -> None:
        from cronbus import Call

        task = self.mod.ahit if asynchronous else self.mod.hit
        task.defer_many([Call() for _ in range(count)])

    def defer_stamp(self, key: str, t0: float, due: float | None = None) -> None:
        self.mod.stamp.defer(key, t0, eta=due)

    def workers(self, processes: int, threads: int) -> Processes:
        command = ["-m", "cronbus", "worker", "--app", "_peers_cronbus:app", "--store", self.url]
        command += ["--queues", common.QUEUE, "--concurrency", str(threads)]
        command += ["--no-connectors", "--log-level", "warning"]
        return Processes(
            [[sys.executable, *command]] * processes,
            gated=processes,
            conn=self.conn,
            log_dir=self.log_dir,
        )

    def defer_tasks(self, callers: int, per_caller: int) -> float:
        hit = self.mod.hit

        async def caller(start: asyncio.Event) -> None:
            await start.wait()
            for _ in range(per_caller):
                await hit.defer_async()

        async def run() -> float:
            start = asyncio.Event()
            tasks = [asyncio.create_task(caller(start)) for _ in range(callers)]
            await asyncio.sleep(0)
            began = time.perf_counter()
            start.set()
            await asyncio.gather(*tasks)
            return time.perf_counter() - began

        return float(self.mod.app.blocking(run()))

    def wait_sample(self, key: str) -> float:
        handle = self.mod.stamp.defer(key, time.time())
        run = handle.wait(timeout=30)
        returned = time.time()
        assert run.finished_at is not None
        return returned - run.finished_at


class Huey(System):
    """Huey with its Redis storage: ``huey_consumer`` processes with thread workers."""

    key = "huey"
    label = LABELS["huey"]

    def __init__(self, conn: redis.Redis, log_dir: Path) -> None:
        super().__init__(conn, log_dir)
        import _peers_huey

        self.mod = _peers_huey

    def defer_hit(self) -> None:
        self.mod.hit()

    def defer_hits(self, count: int, *, asynchronous: bool = False) -> None:
        self.mod.hit.map([()] * count)

    def defer_stamp(self, key: str, t0: float, due: float | None = None) -> None:
        if due is None:
            self.mod.stamp(key, t0)
        else:
            self.mod.stamp.schedule(args=(key, t0), delay=max(0.0, due - time.time()))

    def workers(self, processes: int, threads: int) -> Processes:
        command = [sys.executable, "-m", "huey.bin.huey_consumer", "_peers_huey.huey"]
        command += ["-k", "thread", "-w", str(threads), "-q"]
        return Processes(
            [command] * processes, gated=processes, conn=self.conn, log_dir=self.log_dir
        )


class Dramatiq(System):
    """Dramatiq with its Redis broker: one ``dramatiq`` command with N processes x M threads."""

    key = "dramatiq"
    label = LABELS["dramatiq"]

    def __init__(self, conn: redis.Redis, log_dir: Path) -> None:
        super().__init__(conn, log_dir)
        import _peers_dramatiq

        self.mod = _peers_dramatiq

    def defer_hit(self) -> None:
        self.mod.hit.send()

    def defer_hits(self, count: int, *, asynchronous: bool = False) -> None:
        import dramatiq

        dramatiq.group([self.mod.hit.message() for _ in range(count)]).run()

    def defer_stamp(self, key: str, t0: float, due: float | None = None) -> None:
        if due is None:
            self.mod.stamp.send(key, t0)
        else:
            delay = max(0, round((due - time.time()) * 1000))
            self.mod.stamp.send_with_options(args=(key, t0), delay=delay)

    def workers(self, processes: int, threads: int) -> Processes:
        command = [sys.executable, "-m", "dramatiq", "_peers_dramatiq"]
        command += ["--processes", str(processes), "--threads", str(threads)]
        return Processes([command], gated=processes, conn=self.conn, log_dir=self.log_dir)


def flush(conn: redis.Redis) -> None:
    """Empty the benchmark's Redis database (that one only)."""
    conn.flushdb()


@contextlib.contextmanager
def fresh_store(kind: str, server: str, folder: Path) -> Iterator[str]:
    """A new SQLite file in ``folder``, or a new PostgreSQL schema on ``server`` (dropped after)."""
    if kind == "sqlite":
        path = folder / f"store-{uuid.uuid4().hex[:8]}.db"
        try:
            yield f"sqlite:///{path}"
        finally:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    Path(f"{path}{suffix}").unlink()
        return
    with fresh_pg_schema(server, "bench_peers") as url:
        yield url


# -- the measurements ----------------------------------------------------------------------------
Values = dict[str, float]
Notes = dict[str, Any]


def _until(what: str, check: Callable[[], bool], timeout: float, procs: Processes) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        procs.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:g}s")
        time.sleep(0.01)


_SERVERS = {"postgres": "pg", "redis-server": "redis"}
"""Local servers whose CPU the processed measurement reports (process name: label)."""


def server_cpu_seconds(name: str) -> float:
    """CPU time (user + system) used so far by the local server processes called ``name``
    (``postgres``, ``redis-server``), with their children that have ended (PostgreSQL's
    backends come and go with connections: the postmaster's reaped-children time keeps them);
    NaN where there is no /proc. Only this machine's servers: every store here is loopback."""
    stats, wanted = _proc_stats(), name.encode()
    if stats is None:
        return float("nan")
    # utime, stime, cutime, cstime: fields 14-17 of stat.
    total = sum(sum(int(f[i]) for i in (11, 12, 13, 14)) for n, f in stats if n == wanted)
    return total / os.sysconf("SC_CLK_TCK")


def _proc_stats() -> list[tuple[bytes, list[bytes]]] | None:
    """Each process's name and the fields of its ``/proc/PID/stat`` after the name (the
    third, its state, first); None where there is no /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    stats = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                head, _, tail = f.read().rpartition(b")")
        except OSError:
            continue  # ended meanwhile
        stats.append((head.split(b"(", 1)[-1], tail.split()))
    return stats


def processed(
    system: System, args: argparse.Namespace, *, asynchronous: bool
) -> tuple[Values, Notes]:
    """Runs deferred in bulk, then drained by the workers; the rate from Redis's stamps."""
    conn = system.conn
    with system.session():
        began = time.perf_counter()
        for done in range(0, args.runs, BATCH):
            system.defer_hits(min(BATCH, args.runs - done), asynchronous=asynchronous)
        preload = time.perf_counter() - began
        with system.workers(args.workers, args.threads) as procs:
            procs.wait_ready()
            tag = f"{system.key}-{'async' if asynchronous else 'sync'}"
            if args.profile and system.cronbus:
                procs.spy(Path(args.profile), tag, gil=args.profile_gil)
            cpu_before = procs.cpu_seconds()
            servers_before = {n: server_cpu_seconds(n) for n in _SERVERS}
            released = time.perf_counter()
            procs.release()
            _until(
                f"{system.label}: {args.runs} runs processed",
                lambda: int(conn.get(common.COUNT_KEY) or 0) >= args.runs,
                args.timeout,
                procs,
            )
            wall = time.perf_counter() - released
            first = int(conn.get(common.FIRST_KEY) or 0)
            last = int(conn.get(common.LAST_KEY) or 0)
            time.sleep(0.2)  # a duplicate run would show as a count past --runs
            count = int(conn.get(common.COUNT_KEY) or 0)
            cpu = procs.cpu_seconds() - cpu_before
            servers = {n: server_cpu_seconds(n) - servers_before[n] for n in _SERVERS}
            shares = sorted((int(v) for v in conn.hvals(common.SHARES_KEY)), reverse=True)
    seconds = (last - first) / 1e6
    key = "processed-async" if asynchronous else "processed"
    notes = {
        "runs": args.runs,
        "bodies": count,
        "processes": args.workers,
        "slots": args.threads,
        "per_process": "/".join(str(n) for n in shares),
        "redis_window_s": round(seconds, 3),
        # CPU of the worker processes per 10,000 runs (far steadier than runs/s on a busy
        # machine; includes start-up after the gate and the 0.2 s of idling after the last run).
        "cpu_s_per_10k": round(cpu * 10_000 / args.runs, 2),
        "release_to_done_s": round(wall, 3),
        "preload_s": round(preload, 2),
    }
    for name, used in servers.items():
        # The servers' CPU over the whole drain (release to done), per 10,000 runs and as a
        # share of the machine: what tells whether PostgreSQL or the machine is the limit.
        label = _SERVERS[name]
        if name == "postgres" and system.key != "postgres":
            continue
        notes[f"{label}_cpu_s_per_10k"] = round(used * 10_000 / args.runs, 2)
        notes[f"{label}_cpu_share"] = round(used / (wall * (os.cpu_count() or 1)), 2)
    return {key: args.runs / seconds if seconds > 0 else float("nan")}, notes


def defers(system: System, args: argparse.Namespace) -> tuple[Values, Notes]:
    """Defers per second with no worker: one caller, batches, concurrent callers."""
    out: Values = {}
    with system.session():
        began = time.perf_counter()
        for _ in range(args.single):
            system.defer_hit()
        out["defer-single"] = args.single / (time.perf_counter() - began)
        began = time.perf_counter()
        for done in range(0, args.batch_total, BATCH):
            system.defer_hits(min(BATCH, args.batch_total - done))
        out["defer-batch"] = args.batch_total / (time.perf_counter() - began)
        out["defer-threads"] = _threaded(system, args.callers, args.per_caller)
        if system.cronbus:
            seconds = system.defer_tasks(args.callers, args.per_caller)
            out["defer-tasks"] = args.callers * args.per_caller / seconds
    notes = {
        "single": args.single,
        "batched": args.batch_total,
        "callers": args.callers,
        "per_caller": args.per_caller,
    }
    return out, notes


def _threaded(system: System, callers: int, per_caller: int) -> float:
    """Defers/s from ``callers`` threads, each deferring ``per_caller`` runs one at a time."""
    barrier = threading.Barrier(callers + 1)
    errors: list[BaseException] = []

    def caller() -> None:
        barrier.wait()
        try:
            for _ in range(per_caller):
                system.defer_hit()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, daemon=True) for _ in range(callers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return callers * per_caller / elapsed


def latency(system: System, args: argparse.Namespace, groups: set[str]) -> tuple[Values, Notes]:
    """One idle worker process: defer-to-start, delayed lateness and handle.wait() samples."""
    conn = system.conn
    out: Values = {}
    notes: Notes = {"processes": 1, "slots": args.threads}
    rng = random.Random(1)
    with system.session(), system.workers(1, args.threads) as procs:
        procs.wait_ready()
        procs.release()
        for index in range(args.warmup):
            system.defer_stamp("peers:warm", time.time())
            _until(
                "warm-up run",
                lambda n=index + 1: int(conn.llen("peers:warm")) >= n,
                args.timeout,
                procs,
            )
            time.sleep(rng.uniform(0.005, 0.02))
        if "idle" in groups:
            began = time.perf_counter()
            for index in range(args.idle):
                time.sleep(max(0.0, began + index * args.gap - time.perf_counter()))
                system.defer_stamp("peers:idle", time.time())
            values = _collect(conn, "peers:idle", args.idle, args.timeout, procs)
            out["idle-p50"] = percentile(values, 50)
            out["idle-p99"] = percentile(values, 99)
            notes["idle"] = f"{args.idle}x{args.gap * 1000:g}ms"
            time.sleep(0.2)
        if "delayed" in groups:
            base = time.time() + args.ahead
            for index in range(args.delayed):
                due = base + args.spread * index / args.delayed
                system.defer_stamp("peers:late", due, due)
            values = _collect(
                conn, "peers:late", args.delayed, args.ahead + args.spread + args.timeout, procs
            )
            out["delayed-p50"] = percentile(values, 50)
            out["delayed-p99"] = percentile(values, 99)
            notes["delayed"] = f"{args.delayed} due {args.ahead:g}s+{args.spread:g}s"
        if "wait" in groups and system.cronbus:
            values = []
            for _ in range(args.waits):
                time.sleep(rng.uniform(0.005, 0.02))
                values.append(1000 * system.wait_sample("peers:wait"))
            out["wait-p50"] = percentile(values, 50)
            out["wait-p99"] = percentile(values, 99)
            notes["waits"] = args.waits
    return out, notes


def _collect(conn: redis.Redis, key: str, count: int, timeout: float, procs: Processes) -> list:
    """The ``count`` samples the bodies pushed to ``key``, in milliseconds."""
    _until(f"{count} samples in {key}", lambda: int(conn.llen(key)) >= count, timeout, procs)
    return [1000 * float(v) for v in conn.lrange(key, 0, -1)]


# -- the table -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """A target of issue 15: a figure of one system against a bound or another system."""

    text: str
    system: str
    kind: str
    bound: float | None = None
    """An absolute bound (a minimum, or a maximum for lower-is-better figures)."""
    versus: tuple[str, str] | None = None
    """Or (system, kind) to compare with, times ``factor``."""
    factor: float = 1.0


TARGETS = [
    Target(
        "processed: SQLite >= 2x Huey",
        "sqlite",
        "processed",
        versus=("huey", "processed"),
        factor=2.0,
    ),
    Target(
        "processed: PostgreSQL >= 1x Huey", "postgres", "processed", versus=("huey", "processed")
    ),
    Target(
        "async body >= sync body: SQLite",
        "sqlite",
        "processed-async",
        versus=("sqlite", "processed"),
    ),
    Target(
        "async body >= sync body: PostgreSQL",
        "postgres",
        "processed-async",
        versus=("postgres", "processed"),
    ),
    Target(
        "idle defer -> start p99: SQLite <= Huey", "sqlite", "idle-p99", versus=("huey", "idle-p99")
    ),
    Target("idle defer -> start p99: PostgreSQL <= 5 ms", "postgres", "idle-p99", bound=5.0),
    Target("delayed lateness p99: SQLite <= 2 ms", "sqlite", "delayed-p99", bound=2.0),
    Target("delayed lateness p99: PostgreSQL <= 5 ms", "postgres", "delayed-p99", bound=5.0),
    Target(
        "durable defers, 16 callers: SQLite >= 10,000/s",
        "sqlite",
        "defer-concurrent",
        bound=10_000.0,
    ),
    Target(
        "durable defers, 16 callers: PostgreSQL >= 5,000/s",
        "postgres",
        "defer-concurrent",
        bound=5_000.0,
    ),
    Target("handle.wait() p99: SQLite <= 5 ms", "sqlite", "wait-p99", bound=5.0),
    Target("handle.wait() p99: PostgreSQL <= 5 ms", "postgres", "wait-p99", bound=5.0),
]


def _value(medians: dict[tuple[str, str], float], system: str, kind: str) -> float | None:
    if kind == "defer-concurrent":  # threads or tasks, whichever is faster (the words)
        found = [medians.get((system, k)) for k in ("defer-threads", "defer-tasks")]
        numbers = [v for v in found if v is not None]
        return max(numbers) if numbers else None
    return medians.get((system, kind))


def _higher(kind: str) -> bool:
    return kind == "defer-concurrent" or KINDS[kind].higher_is_better


def evaluate(target: Target, medians: dict[tuple[str, str], float]) -> tuple[str, bool] | None:
    """The target's value as text and whether it is met; None when a figure is missing."""
    value = _value(medians, target.system, target.kind)
    if value is None:
        return None
    higher = _higher(target.kind)
    if target.bound is not None:
        met = value >= target.bound if higher else value <= target.bound
        unit = "/s" if higher else " ms"
        return f"{format_value(value)}{unit}", met
    assert target.versus is not None
    other = _value(medians, *target.versus)
    if other is None or other == 0:
        return None
    ratio = value / other
    met = ratio >= target.factor if higher else ratio <= target.factor
    return f"{ratio:.2f}x", met


def print_peers_table(
    medians: dict[tuple[str, str], float], systems: Sequence[str], repeat: int
) -> None:
    """Each figure for every system, cronbus / best peer, then the targets of issue 15."""
    title = "peers: every figure" + (f" (median of {repeat} rounds)" if repeat > 1 else "")
    heading(title)
    cronbuses = [s for s in systems if s not in PEERS]
    peers = [s for s in systems if s in PEERS]
    header = ["figure", *[LABELS[s] for s in systems]]
    header += [f"{LABELS[s].removeprefix('cronbus ')} / best peer" for s in cronbuses if peers]
    rows = [header]
    for kind, spec in KINDS.items():
        if not any((s, kind) in medians for s in systems):
            continue
        row = [f"{spec.title} ({spec.unit})"]
        for system in systems:
            value = medians.get((system, kind))
            row.append("-" if value is None else format_value(value))
        best_peer = _best([(p, medians.get((p, kind))) for p in peers], spec.higher_is_better)
        for system in cronbuses if peers else []:
            value = medians.get((system, kind))
            if value is None or best_peer is None or best_peer[1] == 0:
                row.append("-")
            else:
                row.append(f"{value / best_peer[1]:.2f}x {LABELS[best_peer[0]]}")
        rows.append(row)
    _print_rows(rows)
    print(
        "Times in ms (lower is better), rates per second. cronbus defers are durable (committed);"
        " Huey's and Dramatiq's are in Redis's memory (no persistence here)."
    )
    found = [(t, evaluate(t, medians)) for t in TARGETS]
    lines = [("target (issue 15)", "value", "status")]
    lines += [(t.text, r[0], "met" if r[1] else "NOT met") for t, r in found if r is not None]
    if len(lines) > 1:
        print()
        _print_rows([list(line) for line in lines])


def _best(values: list[tuple[str, float | None]], higher: bool) -> tuple[str, float] | None:
    found = [(s, v) for s, v in values if v is not None]
    if not found:
        return None
    return (max if higher else min)(found, key=lambda item: item[1])


def _print_rows(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        cells = [c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)]
        print("  ".join(cells).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


# -- main ----------------------------------------------------------------------------------------
QUICK = {
    "runs": 1000,
    "single": 200,
    "batch_total": 2000,
    "per_caller": 20,
    "idle": 40,
    "delayed": 20,
    "ahead": 0.5,
    "spread": 0.5,
    "waits": 20,
    "warmup": 2,
}


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        action="append",
        help=f"systems to measure, comma-separated: {', '.join(SYSTEMS)} (default all)",
    )
    parser.add_argument(
        "--figures",
        action="append",
        help=f"figure groups, comma-separated: {', '.join(GROUPS)} (default all)",
    )
    parser.add_argument(
        "--store",
        default="both",
        help="cronbus stores: sqlite, postgres, both (default) or a postgresql:// URL (the "
        f"server for fresh schemas; default {PG_SERVER})",
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds; figures are medians")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--runs", type=int, default=10_000, help="processed runs (10,000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--threads", type=int, default=8, help="slots per process (8)")
    parser.add_argument("--single", type=int, default=2000, help="defers one by one (2,000)")
    parser.add_argument("--batch-total", type=int, default=10_000, help="defers in batches")
    parser.add_argument("--callers", type=int, default=16, help="concurrent callers (16)")
    parser.add_argument("--per-caller", type=int, default=250, help="defers per caller (250)")
    parser.add_argument("--idle", type=int, default=300, help="idle-latency runs (300)")
    parser.add_argument("--gap", type=float, default=0.01, help="seconds between them (0.01)")
    parser.add_argument("--delayed", type=int, default=200, help="delayed runs (200)")
    parser.add_argument("--ahead", type=float, default=2.0, help="their first due time, s (2)")
    parser.add_argument("--spread", type=float, default=2.0, help="spread of due times, s (2)")
    parser.add_argument("--waits", type=int, default=100, help="handle.wait() samples (100)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up runs (5)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per wait")
    parser.add_argument("--profile", metavar="DIR", help="py-spy the cronbus workers into DIR")
    parser.add_argument(
        "--profile-gil",
        action="store_true",
        help="with --profile: only samples of the thread holding the GIL (py-spy --gil)",
    )
    return parser


def _choose(values: list[str] | None, allowed: Sequence[str], what: str) -> list[str]:
    if not values:
        return list(allowed)
    chosen = [v.strip() for value in values for v in value.split(",") if v.strip()]
    chosen = [{"pg": "postgres", "postgresql": "postgres"}.get(v, v) for v in chosen]
    unknown = [v for v in chosen if v not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)}; use {', '.join(allowed)}")
    return [v for v in allowed if v in chosen]


def make_systems(
    args: argparse.Namespace, conn: redis.Redis, log_dir: Path
) -> list[tuple[str, Callable[[], System]]]:
    """The systems to measure, in order, each made when its turn comes."""
    stores = dict(store_choices(args.store))
    chosen = _choose(args.only, SYSTEMS, "system")
    makers: list[tuple[str, Callable[[], System]]] = []
    for key in chosen:
        if key in ("sqlite", "postgres"):
            if key in stores:
                server = stores[key]

                def make(k: str = key, s: str = server) -> System:
                    return Cronbus(conn, log_dir, k, s)

                makers.append((key, make))
        elif key == "huey":
            makers.append((key, lambda: Huey(conn, log_dir)))
        else:
            makers.append((key, lambda: Dramatiq(conn, log_dir)))
    return makers


def measure(system: System, args: argparse.Namespace, groups: set[str]) -> list[tuple[str, Figure]]:
    """Every chosen figure of one system (with its key in :data:`KINDS`), printed as it comes."""
    figures: list[tuple[str, Figure]] = []
    phases: list[tuple[str, Callable[[], tuple[Values, Notes]]]] = []
    if "processed" in groups:
        phases.append(("processed", lambda: processed(system, args, asynchronous=False)))
    if "async" in groups and system.cronbus:
        phases.append(("async", lambda: processed(system, args, asynchronous=True)))
    if "defers" in groups:
        phases.append(("defers", lambda: defers(system, args)))
    if groups & {"idle", "delayed", "wait"}:
        phases.append(("latency", lambda: latency(system, args, groups)))
    for _, phase in phases:
        values, notes = phase()
        # Other processes on the machine show here: compare only figures taken at a like load.
        notes = {"system": system.key, **notes, "load1": round(os.getloadavg()[0], 1)}
        for kind, value in values.items():
            spec = KINDS[kind]
            figure = Figure(
                BENCH,
                f"{system.label}: {spec.title}",
                value,
                spec.unit,
                notes,
                spec.higher_is_better,
            )
            figures.append((kind, figure))
        parts = " | ".join(f"{KINDS[k].title} {format_value(v)}" for k, v in values.items())
        print(f"[{BENCH}] {system.label}: {parts}", flush=True)
        print(f"    settings: {' '.join(f'{k}={v}' for k, v in notes.items())}", flush=True)
    return figures


def redis_connection() -> redis.Redis:
    """The benchmark's Redis database; exits with a clear message when Redis does not answer."""
    conn = redis.Redis.from_url(common.REDIS_URL, socket_connect_timeout=2)
    try:
        conn.ping()
    except redis.RedisError as exc:
        raise SystemExit(f"peers: Redis does not answer at {common.REDIS_URL}: {exc}") from None
    return conn


def ratio_figures(medians: dict[tuple[str, str], float]) -> list[Figure]:
    """The targets of issue 15 as figures (for ``bench/run.py``'s summary)."""
    out = []
    for target in TARGETS:
        found = evaluate(target, medians)
        value = _value(medians, target.system, target.kind)
        if found is None or value is None:
            continue
        if target.bound is not None:
            higher = _higher(target.kind)
            unit = "defers/s" if higher else "ms"
            out.append(
                Figure(BENCH, f"target: {target.text}", value, unit, {}, higher, target.bound)
            )
        else:
            assert target.versus is not None
            other = _value(medians, *target.versus)
            assert other is not None
            higher = _higher(target.kind)
            out.append(
                Figure(
                    BENCH, f"target: {target.text}", value / other, "x", {}, higher, target.factor
                )
            )
    return out


def main(argv: list[str] | None = None, *, environment: bool = True) -> list[Figure]:
    """Measure, print each figure, then the table; return the figures (medians and targets)."""
    args = build_parser().parse_args(argv)
    if args.quick:
        defaults = build_parser()
        for name, value in QUICK.items():
            if getattr(args, name) == defaults.get_default(name):
                setattr(args, name, value)
    groups = set(_choose(args.figures, GROUPS, "figure group"))
    if environment:
        print_environment()
    conn = redis_connection()
    info = conn.info("server")
    heading(
        f"peers: cronbus beside Huey and Dramatiq (redis {info.get('redis_version')} at "
        f"{common.REDIS_URL}; one system at a time)"
    )
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    figures: list[Figure] = []
    values: dict[tuple[str, str], list[float]] = {}
    systems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cronbus-bench-peers-") as folder:
        try:
            for _ in range(args.repeat):
                for key, make in make_systems(args, conn, Path(folder)):
                    if key not in systems:
                        systems.append(key)
                    for kind, figure in measure(make(), args, groups):
                        figures.append(figure)
                        values.setdefault((key, kind), []).append(figure.value)
        finally:
            flush(conn)
    medians = {k: statistics.median(v) for k, v in values.items()}
    print_peers_table(medians, systems, args.repeat)
    if args.profile:
        from _peers_profile import summarize_folder

        summarize_folder(Path(args.profile))
    return figures + ratio_figures(medians)


if __name__ == "__main__":
    exit_on_sigterm()
    main(sys.argv[1:])
