"""The app behind the Schemathesis run of the HTTP API: a few tasks with arguments of several
kinds, so deferring runs, job definitions and task subscriptions all have something to name."""

from __future__ import annotations

from cronbus import App, Retry

app = App()


@app.task(name="add")
def add(a: int, b: int = 0) -> int:
    """Add two numbers."""
    return a + b


@app.task(name="send", queue="mail", retries=2)
def send(to: str, subject: str = "hi") -> str:
    """Pretend to send mail."""
    return f"{subject} {to}"


@app.task(name="noop")
def noop() -> None:
    """Do nothing."""


@app.task(name="flaky", retries=Retry(retries=3, backoff=60.0, factor=2.0, jitter=0.0))
def flaky(message: str) -> None:
    """Raise every time (its runs retry, then die)."""
    raise ValueError(message)


@app.task(name="on_event")
def on_event(event: dict[str, object]) -> None:
    """The target of task subscriptions."""
