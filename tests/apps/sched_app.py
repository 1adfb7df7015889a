"""An app for scheduler processes: one task that jobs fire."""

from __future__ import annotations

from cronbus import App

app = App()


@app.task(name="sched.noop")
def noop() -> None:
    """Does nothing: the tests count runs, not effects."""
