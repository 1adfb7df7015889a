"""The app behind the console's browser tests (tests/e2e): tasks that succeed, fail, fail once,
hide an argument and take their time; cron jobs (one paused, one weekly the tests fire by hand);
and a handler subscription. The e2e fixtures add a task subscription and a loopback webhook
subscription through the services, and seed runs of these tasks."""

from __future__ import annotations

import logging

from cronbus import App, current_token
from cronbus.events import Event

app = App()
log = logging.getLogger("console_app")

_charged: set[str] = set()
"""Invoices :func:`charge` has been asked for in this process (its first try fails)."""


@app.task(name="ok")
def ok(order: int, customer: str = "ada") -> dict[str, object]:
    """Succeeds at once with a small result."""
    print("stock checked, payment captured")
    return {"order": order, "customer": customer, "status": "confirmed"}


@app.task(name="boom", retries=0)
def boom(reason: str) -> None:
    """Always raises: its only attempt fails, so the run ends dead (a dead letter)."""
    raise ValueError(f"cannot bill the customer: {reason}")


@app.task(name="charge", retries=0)
def charge(invoice: str) -> str:
    """Fails the first time an invoice is charged in this process and succeeds afterwards, so
    a requeued dead letter of it ends ``succeeded`` instead of dead again."""
    if invoice not in _charged:
        _charged.add(invoice)
        raise ValueError(f"the payment gateway refused invoice {invoice} (try again)")
    return f"invoice {invoice} charged"


@app.task(name="refund", redact=("card",))
def refund(order: int, card: str) -> str:
    """Refunds an order to a card; the card number is never shown (``redact``)."""
    return f"order {order} refunded to the card ending {card[-4:]}"


@app.task(name="slow", queue="reports")
def slow(seconds: float) -> str:
    """Takes ``seconds``, stopping early when cancelled (it waits on its cancel token)."""
    if current_token().wait(seconds):
        return "cancelled"
    return f"slept {seconds} s"


@app.task(name="on_order")
def on_order(event: dict[str, object]) -> None:
    """The target of the task subscription: logs the order event it is given."""
    log.info("order event %s", event.get("id"))


@app.job(name="every_minute", cron="* * * * *")
@app.task(name="heartbeat")
def heartbeat() -> str:
    """A heartbeat job: fires at the start of every minute."""
    return "alive"


@app.job(name="nightly_report", cron="0 3 * * *", tz="Europe/Paris", paused=True)
@app.task(name="send_report", queue="reports")
def send_report() -> str:
    """A paused job: would fire at 03:00 Paris time."""
    return "report sent"


@app.job(name="weekly_digest", cron="0 6 * * 1", overlap="skip")
@app.task(name="send_digest", queue="emails")
def send_digest(seconds: float = 4.0) -> str:
    """Fires on Mondays at 06:00 UTC; the tests trigger it by hand. It takes a few seconds, so
    a page opened at once sees it queued or running before it succeeds."""
    current_token().wait(seconds)
    return "digest sent"


@app.subscribe(topic="orders", name="audit-orders", types=["order.*"], start="earliest")
def audit_orders(event: Event) -> None:
    """A handler subscription: every order event, in the dispatcher's process."""
    log.info("audit %s at offset %s", event.type, event.offset)
