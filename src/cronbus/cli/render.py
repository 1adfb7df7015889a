"""Output: Rich tables for people, and one JSON document on stdout for scripts.

Times are ISO-8601 UTC strings in JSON, and UTC ``YYYY-MM-DD HH:MM:SS`` in tables, so what a
person reads and what a script parses never disagree about the time zone. Everything that comes
from user code (arguments, errors, logs) is printed as plain text, never as Rich markup.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from .. import run_figures
from ..model import Attempt, Children, ErrorInfo, Run
from ..states import AttemptOutcome, RunState

_STATE_STYLES = {
    RunState.SCHEDULED: "cyan",
    RunState.QUEUED: "blue",
    RunState.RUNNING: "yellow",
    RunState.CANCELLING: "yellow",
    RunState.SUCCEEDED: "green",
    RunState.FAILED: "red",
    RunState.CANCELLED: "dim",
    RunState.DEAD: "bold red",
    RunState.SKIPPED: "dim",
    RunState.WAITING: "magenta",
}
_OUTCOME_STYLES = {
    AttemptOutcome.SUCCEEDED: "green",
    AttemptOutcome.FAILED: "red",
    AttemptOutcome.TIMED_OUT: "red",
    AttemptOutcome.CANCELLED: "dim",
    AttemptOutcome.LOST: "yellow",
}
_MESSAGE_WIDTH = 80
_PIPE_WIDTH = 1000
_RUN_COLUMNS = ("ID", "TASK", "QUEUE", "STATE", "PRI", "ATTEMPTS", "DUE (UTC)")
"""ATTEMPTS counts the attempts made, lost ones included: the number of the latest attempt in
``runs show`` (the retry budget, counted in tries, is there too)."""
_DEAD_COLUMNS = ("ID", "TASK", "QUEUE", "ATTEMPTS", "DIED (UTC)", "ERROR", "MESSAGE")
_ATTEMPT_COLUMNS = ("#", "WORKER", "OUTCOME", "STARTED (UTC)", "SECONDS", "ERROR")


def console() -> Console:
    """A console on stdout that never reads markup or emoji codes in the text it prints."""
    out = Console(markup=False, emoji=False, highlight=False)
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        # A pipe has no width: squeezing tables to 80 columns would cut what grep looks for.
        out.width = _PIPE_WIDTH
    return out


# -- JSON ----------------------------------------------------------------------------------------
def print_json(document: Any) -> None:
    """Write one JSON document to stdout."""
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def iso(timestamp: float | None) -> str | None:
    """Epoch seconds as an ISO-8601 UTC string (None stays None)."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")


def error_json(error: ErrorInfo | None) -> dict[str, str] | None:
    """An error as ``{type, message, traceback}``, or None."""
    if error is None:
        return None
    return {"type": error.type, "message": error.message, "traceback": error.traceback}


def run_json(run: Run) -> dict[str, Any]:
    """A run as a JSON object (without its attempts)."""
    return {
        "id": run.id,
        "task": run.task,
        "queue": run.queue,
        "state": run.state.value,
        "priority": run.priority,
        "lane": run.lane.name.lower(),
        "eta": iso(run.eta),
        "attempt_count": run.attempts,
        "max_attempts": run.max_attempts,
        "timeout": run.timeout,
        "idempotency_key": run.idempotency_key,
        "args": run.args,
        "kwargs": run.kwargs,
        "result": run.result,
        "error": error_json(run.error),
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "finished_at": iso(run.finished_at),
        "lease_owner": run.lease_owner,
        "tries": run.tries,
        "lost": run.lost,
        "started_at": iso(run.started_at),
        "duration": run_figures.duration(run),
        "worker_id": run.worker_id,
        "lease_expires": iso(run.lease_expires),
        "route": run.route,
        "route_labels": list(run.route_labels),
        "target_worker": run.target_worker,
        "limit_key": run.limit_key,
        "rate_key": run.rate_key,
        "parent_id": run.parent_id,
        "child_index": run.child_index,
        "shard_total": run.shard_total,
        "fanout": fanout_json(run.children),
    }


def fanout_json(children: Children | None) -> dict[str, Any] | None:
    """A fan-out parent's counters as a JSON object (None: the run is no parent)."""
    if children is None:
        return None
    return {
        "kind": children.kind.value,
        "total": children.total,
        "ended": children.ended,
        "succeeded": children.succeeded,
        "reduce_run_id": children.reduce_run_id,
        "note": children.note,
    }


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    """An attempt as a JSON object."""
    return {
        "id": attempt.id,
        "number": attempt.number,
        "worker_id": attempt.worker_id,
        "outcome": None if attempt.outcome is None else attempt.outcome.value,
        "result": attempt.result,
        "error": error_json(attempt.error),
        "logs": attempt.logs,
        "started_at": iso(attempt.started_at),
        "finished_at": iso(attempt.finished_at),
        "duration": _duration(attempt),
    }


def run_detail_json(
    run: Run,
    attempts: Sequence[Attempt],
    warnings: Sequence[str] = (),
    children: Sequence[Run] = (),
) -> dict[str, Any]:
    """A run with its attempts, oldest first, why it waits, and (a parent) its first
    children by index."""
    return {
        **run_json(run),
        "attempts": [attempt_json(a) for a in attempts],
        "warnings": list(warnings),
        "children": [run_json(child) for child in children],
    }


# -- tables --------------------------------------------------------------------------------------
def print_runs(runs: Sequence[Run]) -> None:
    """A table of runs, one per row."""
    if not runs:
        click.echo("no runs")
        return
    table = _table(*_RUN_COLUMNS, right=("ID", "PRI", "ATTEMPTS"))
    for run in runs:
        table.add_row(
            str(run.id),
            run.task,
            run.queue,
            state_text(run.state),
            str(run.priority),
            str(run.attempts),
            human_time(run.eta),
        )
    console().print(table)


def print_dead(runs: Sequence[Run]) -> None:
    """A table of dead runs with the error that killed each."""
    if not runs:
        click.echo("no dead runs")
        return
    table = _table(*_DEAD_COLUMNS, right=("ID", "ATTEMPTS"), wrap=("MESSAGE",))
    for run in runs:
        error = run.error
        table.add_row(
            str(run.id),
            run.task,
            run.queue,
            str(run.attempts),
            human_time(run.finished_at),
            error.type if error else "",
            _first_line(error.message) if error else "",
        )
    console().print(table)


def print_run(
    run: Run,
    attempts: Sequence[Attempt],
    warnings: Sequence[str] = (),
    section: RenderableType | None = None,
) -> None:
    """A run's fields (after ``warnings``: why it waits), ``section`` (a parent's children),
    its attempts, and then each attempt's traceback and logs in full."""
    out = console()
    out.print(Text.assemble(f"run {run.id}  ", (run.task, "bold"), "  ", state_text(run.state)))
    for warning in warnings:
        # A parent waits for its children by design; a run waiting for a worker is a warning.
        if run.state is RunState.WAITING:
            out.print(Text(warning, style="magenta"))
        else:
            out.print(Text(f"warning: {warning}", style="yellow"))
    out.print(_run_fields(run))
    if section is not None:
        out.print()
        out.print(section)
    if not attempts:
        out.print("no attempts yet")
        return
    out.print()
    out.print(_attempts_table(attempts))
    for attempt in attempts:
        _print_blocks(out, attempt)


def _run_fields(run: Run) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("queue", run.queue),
        ("priority", str(run.priority)),
        ("attempts", run_figures.attempts_text(run)),
        ("due", human_time(run.eta)),
        ("created", human_time(run.created_at)),
        ("updated", human_time(run.updated_at)),
        ("args", _compact(run.args)),
        ("kwargs", _compact(run.kwargs)),
        ("result", _compact(run.result)),
    ]
    optional: list[tuple[str, str | None]] = [
        ("started", human_time(run.started_at)),
        ("finished", _finished_text(run)),
        ("timeout", None if run.timeout is None else f"{run.timeout:g} s"),
        ("idempotency key", run.idempotency_key),
        ("worker", run.worker_id),
        ("error", _error_line(run.error)),
        ("route", None if run.route == "any" else run.route),
        ("target worker", run.target_worker),
        ("labels", ", ".join(run.route_labels)),
        ("limit key", run.limit_key),
        ("rate key", run.rate_key),
        ("parent", parent_text(run)),
    ]
    rows.extend((name, value) for name, value in optional if value)
    for name, value in rows:
        grid.add_row(name, value)
    return grid


def parent_text(run: Run) -> str | None:
    """A child's parent and place: ``12 (index 3 of 10)``, ``12 (reduce run)``; None for a
    run with no parent."""
    if run.parent_id is None:
        return None
    if run.child_index is None:
        return f"{run.parent_id} (its reduce run)"
    total = "" if run.shard_total is None else f" of {run.shard_total}"
    return f"{run.parent_id} (index {run.child_index}{total})"


def _finished_text(run: Run) -> str | None:
    """``2026-01-02 03:04:05 (after 1.5 s)``: the end, and how long the run took from its first
    attempt's start (:func:`cronbus.run_figures.duration`)."""
    took = run_figures.duration(run)
    if run.finished_at is None:
        return None
    end = human_time(run.finished_at)
    return end if took is None else f"{end} (after {took:.3f} s)"


def _attempts_table(attempts: Sequence[Attempt]) -> Table:
    # The finish time and the error message are left to the blocks below the table, so that the
    # table fits a terminal of 80 columns.
    table = _table(*_ATTEMPT_COLUMNS, right=("#", "SECONDS"), wrap=("ERROR",))
    for attempt in attempts:
        duration = _duration(attempt)
        table.add_row(
            str(attempt.number),
            attempt.worker_id,
            _outcome_text(attempt.outcome),
            human_time(attempt.started_at),
            "" if duration is None else f"{duration:.3f}",
            attempt.error.type if attempt.error else "",
        )
    return table


def _print_blocks(out: Console, attempt: Attempt) -> None:
    """An attempt's traceback and logs, verbatim: no wrapping, cropping or markup."""
    blocks = (
        ("traceback", attempt.error.traceback if attempt.error else ""),
        ("logs", attempt.logs),
    )
    for name, text in blocks:
        if text.strip():
            out.print()
            out.print(Text(f"attempt {attempt.number} {name}:", style="bold"))
            out.out(text.rstrip("\n"), highlight=False)


# -- small pieces --------------------------------------------------------------------------------
def _table(*columns: str, right: Collection[str] = (), wrap: Collection[str] = ()) -> Table:
    """A borderless table; ``right`` columns (numbers) are right-aligned.

    Only the ``wrap`` columns (free text) wrap, and they give up their width first when the
    screen is narrow: a time or an id split over two lines would read as two values.
    """
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in columns:
        justify: JustifyMethod = "right" if name in right else "left"
        table.add_column(name, justify=justify, no_wrap=name not in wrap, overflow="ellipsis")
    return table


def state_text(state: RunState) -> Text:
    """A run state, coloured when the terminal shows colours."""
    return Text(state.value, style=_STATE_STYLES.get(state, ""))


def _outcome_text(outcome: AttemptOutcome | None) -> Text:
    if outcome is None:
        return Text("running", style="yellow")
    return Text(outcome.value, style=_OUTCOME_STYLES.get(outcome, ""))


def human_time(timestamp: float | None) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM:SS`` in UTC, or an empty string."""
    if timestamp is None:
        return ""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(attempt: Attempt) -> float | None:
    if attempt.finished_at is None:
        return None
    return round(attempt.finished_at - attempt.started_at, 6)


def _error_line(error: ErrorInfo | None) -> str | None:
    if error is None:
        return None
    return f"{error.type}: {_first_line(error.message)}"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= _MESSAGE_WIDTH else line[: _MESSAGE_WIDTH - 1] + "…"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
