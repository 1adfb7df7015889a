"""Progress bars for long commands (migrate, replay, runs purge, bulk requeue, jobs sync).

A bar is drawn on stderr, and only when stderr is a terminal and the command was not asked for
``--json``: scripts and pipes see the same output as before, and JSON stays one document::

    with progress("purging runs", total=None, quiet=as_json) as bar:
        while removed := await purge_batch():
            bar.advance(removed)

``total`` may be unknown (None): the bar then shows a count and a rate, not a fraction.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["Bar", "progress", "steps"]


class Bar(Protocol):
    """What a long command reports its progress to."""

    def advance(self, done: int = 1) -> None:
        """Count ``done`` more items as done."""

    def total(self, total: int | None) -> None:
        """Set (or learn late) how many items there are in all."""


class _Silent:
    """The bar of a command that shows none (``--json``, or stderr not a terminal)."""

    def advance(self, done: int = 1) -> None:
        """Nothing to draw."""

    def total(self, total: int | None) -> None:
        """Nothing to draw."""


class _Drawn:
    """A Rich progress task on stderr."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress = progress
        self._task = task

    def advance(self, done: int = 1) -> None:
        """Count ``done`` more items and redraw (Rich limits the redraw rate)."""
        self._progress.advance(self._task, done)

    def total(self, total: int | None) -> None:
        """Set the total the bar is measured against."""
        self._progress.update(self._task, total=total)


def steps(bar: Bar) -> Callable[[int, int], None]:
    """A ``(done, total)`` feed for ``bar``, for work that reports where it stands rather than
    what it just did (``cronbus migrate``); safe from another thread (Rich locks its tasks)."""
    seen = 0

    def step(done: int, total: int) -> None:
        nonlocal seen
        bar.total(total)
        bar.advance(done - seen)
        seen = done

    return step


def shown(quiet: bool = False) -> bool:
    """Whether a bar would be drawn: not ``quiet`` and stderr is a terminal."""
    return not quiet and sys.stderr.isatty()


@contextmanager
def progress(description: str, *, total: int | None = None, quiet: bool = False) -> Iterator[Bar]:
    """A progress bar for the block, drawn on stderr when :func:`shown`; removed at the end."""
    if not shown(quiet):
        yield _Silent()
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as drawn:
        yield _Drawn(drawn, drawn.add_task(description, total=total))
