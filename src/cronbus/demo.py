"""The quick-start demo: ``cronbus server --app cronbus.demo:app``.

It defers a handful of runs when the server starts, and again every few seconds, of tasks that
succeed, fail and then succeed on a retry, time out, and end as dead letters; a cron job fires
every five seconds; and each round publishes an ``order.created`` event to the ``orders``
topic, which a handler subscription receives. The worker's log shows each attempt as it ends;
``cronbus runs list``, ``cronbus dlq list``, ``cronbus events tail orders`` and
``cronbus subs list`` show the rest.
"""

from __future__ import annotations

import asyncio
import logging
import random

from . import App, Retry, current_token
from .events import Event

app = App()
log = logging.getLogger("cronbus.demo")
_FAST_RETRY = Retry(retries=2, backoff=0.5, factor=2.0, jitter=0.2)


@app.task(queue="emails")
def send_email(to: str, subject: str) -> str:
    """Succeeds at once."""
    print(f"sending {subject!r} to {to}")
    return f"sent to {to}"


@app.task(retries=_FAST_RETRY)
def flaky_report(day: str) -> dict[str, object]:
    """Fails on its first attempt and succeeds on a retry."""
    attempt = flaky_report_attempts.setdefault(day, 0) + 1
    flaky_report_attempts[day] = attempt
    if attempt == 1:
        raise ConnectionError(f"the report database for {day} is not answering yet")
    return {"day": day, "rows": random.randint(100, 999), "attempt": attempt}


flaky_report_attempts: dict[str, int] = {}


@app.task(timeout=1.0)
async def slow_export(rows: int) -> int:
    """Takes longer than its one-second timeout, so it is interrupted and ends dead."""
    await asyncio.sleep(5)
    return rows


@app.task(timeout=1.0)
def stubborn_sync(seconds: float) -> None:
    """A thread task past its timeout: it is told to stop through its cancel token."""
    if current_token().wait(seconds):
        print("cancel token set: stopping early")


@app.task(retries=Retry(retries=1, backoff=0.2), redact=("card",))
def charge_card(amount: int, card: str) -> None:
    """Always fails: after its retry it becomes a dead letter that can be requeued. Its card
    number is hidden from every token (the console and the API show ``[redacted]``)."""
    raise ValueError(f"card ending {card[-4:]} declined for {amount} cents")


@app.job(cron="*/5 * * * * *", overlap="skip")
def heartbeat() -> str:
    """A job: fires every five seconds (6-field cron, seconds first), at :00, :05, :10..."""
    return "alive"


@app.subscribe(topic="orders", name="demo.print-orders", types=["order.*"], start="earliest")
def print_order(event: Event) -> None:
    """A handler subscription: the dispatcher pushes each matching event here."""
    print(f"order event {event.type} at offset {event.offset}: {event.data}")


async def _defer_batch(round_: int) -> None:
    await send_email.defer_async("ada@example.com", subject=f"welcome #{round_}")
    await flaky_report.defer_async(day=f"2026-11-{round_ % 28 + 1:02d}-{random.random():.6f}")
    await slow_export.defer_async(1000)
    await stubborn_sync.defer_async(10.0)
    await charge_card.defer_async(1999, card="4000 0000 0000 0002")
    await app.publish_async("orders", "order.created", {"order": round_, "amount": 1999})
    log.info("demo: deferred round %d of 5 runs and published one event", round_)


@app.on_startup
async def start_demo(app: App) -> None:
    """Defer a round of demo runs now and every ten seconds."""

    async def rounds() -> None:
        round_ = 1
        while True:
            await _defer_batch(round_)
            round_ += 1
            await asyncio.sleep(10)

    task = asyncio.get_running_loop().create_task(rounds())
    _background.add(task)
    task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()
