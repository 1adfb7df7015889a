"""How ``runs show`` and ``runs children`` print a fan-out parent's children: its counters in a
line, its first children in a table, and the command that shows the rest."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..model import Children, Run
from ..states import ACTIVE
from . import render

_CHILD_COLUMNS = ("INDEX", "ID", "TASK", "STATE", "WORKER", "UPDATED (UTC)")
REDUCE = "reduce"
"""What the INDEX column says of the reduce run (which has no index)."""


def children_summary(children: Children) -> str:
    """``children: 3 of 10 ended, 2 succeeded (shards)``, with the reduce run and the note."""
    line = (
        f"children: {children.ended} of {children.total} ended, {children.succeeded} "
        f"succeeded ({children.kind.value})"
    )
    if children.reduce_run_id is not None:
        line += f"; reduce run {children.reduce_run_id}"
    if children.note:
        line += f"; {children.note}"
    return line


def children_section(run: Run, shown: Sequence[Run]) -> Group | None:
    """A parent's children as ``runs show`` prints them: the counters, the first children
    (``shown``) and, when there are more, how to page through them; None for a run that is
    no parent."""
    if run.children is None:
        return None
    parts: list[Text | Table] = [Text(children_summary(run.children), style="bold")]
    if shown:
        parts.append(children_table(shown))
    listed = [child for child in shown if child.child_index is not None]
    if listed and len(listed) < run.children.total:
        last = listed[-1].child_index
        parts.append(
            Text(
                f"showing {len(listed)} of {run.children.total} children: "
                f"cronbus runs children {run.id} --after {last} shows the next ones "
                f"(cronbus runs children {run.id} lists them all)",
                style="dim",
            )
        )
    return Group(*parts)


def children_table(children: Sequence[Run]) -> Table:
    """A table of child runs: index, id, task, state, the worker running it (or the one it
    is routed to, marked ``→``) and when it last changed."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in _CHILD_COLUMNS:
        table.add_column(name, justify="right" if name in ("INDEX", "ID") else "left", no_wrap=True)
    for child in children:
        table.add_row(
            REDUCE if child.child_index is None else str(child.child_index),
            str(child.id),
            child.task,
            render.state_text(child.state),
            worker_text(child),
            render.human_time(child.updated_at),
        )
    return table


def worker_text(run: Run) -> str:
    """The worker of a run: the one holding it, else ``→ W`` for the one it is routed to."""
    if run.lease_owner is not None and run.state in ACTIVE:
        return run.lease_owner
    if run.target_worker is not None:
        return f"→ {run.target_worker}"
    return run.worker_id or ""
