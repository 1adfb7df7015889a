"""The `cronbus alerts` commands: list rules and what fires, the history, silences, and the
rules stored in the store (add, remove).

Rules defined in the app's code (``app.alerts.add``, ``@app.alert``) are listed with
``--app``; the others are stored by ``cronbus alerts add``. Listings never show a secret:
URLs are masked (a chat URL down to its host), signing secrets counted, passwords starred.
These commands work on the store (``--app``/``--store``); the HTTP API has no alert routes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from ..observability.alerts import build_rule, chat, email, webhook
from ..observability.alerts.records import AlertRule, AlertState, HistoryEntry, Silence
from ..services import Services
from . import render
from .connect import AnyServices, Where, run_services, where_options
from .loading import CliError, CronbusGroup
from .subs_render import first_line, table

T = TypeVar("T")
_KINDS = (
    "job-failures",
    "dead-runs",
    "queue-depth",
    "queue-age",
    "scheduler-lag",
    "subscription-failing",
    "circuit-open",
    "worker-lost",
    "queue-unserved",
)
_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)


def _alerts(where: Where, work: Callable[[Any], Awaitable[T]], *, create: bool = False) -> T:
    """Await ``work(alerts service)`` on the store ``where`` names."""
    if where.remote:
        raise CliError(
            "cronbus alerts works on the store (--app or --store); the HTTP API (--url) has "
            "no alert routes"
        )
    from ..services.alerts import AlertsService

    async def call(services: AnyServices) -> T:
        assert isinstance(services, Services)  # local: where.remote was refused above
        return await work(AlertsService(services.context))

    return run_services(where, call, create=create)


@click.group(cls=CronbusGroup)
def alerts() -> None:
    """List alert rules and what fires, see the history, silence rules, add and remove rules."""


@alerts.command("list")
@where_options()
@_json_option
def list_alerts(where: Where, as_json: bool) -> None:
    """List the alert rules (the --app's code rules and the stored ones), the alerts firing,
    and the silences running."""

    async def read(service: Any) -> tuple[list[AlertRule], list[AlertState], list[Silence]]:
        return await service.rules(), await service.firing(), await service.silences()

    rules, firing, silences = _alerts(where, read)
    if as_json:
        render.print_json(
            {
                "rules": [_rule_json(rule) for rule in rules],
                "firing": [_state_json(state) for state in firing],
                "silences": [_silence_json(silence) for silence in silences],
            }
        )
        return
    _print_rules(rules, firing, silences)


@alerts.command("history")
@click.option("--rule", metavar="NAME", help="Only this rule's entries.")
@click.option(
    "--limit", type=click.IntRange(1, 250), default=50, show_default=True, help="Entries shown."
)
@where_options()
@_json_option
def history(rule: str | None, limit: int, where: Where, as_json: bool) -> None:
    """Show the alert history, newest first: alerts fired, repeated and resolved, and
    destinations that failed (and were told later)."""
    page = _alerts(where, lambda service: service.history(rule=rule, limit=limit))
    entries: list[HistoryEntry] = page.items
    if as_json:
        render.print_json([_entry_json(entry) for entry in entries])
        return
    if not entries:
        click.echo("no alert history")
        return
    rows = table("AT (UTC)", "RULE", "SUBJECT", "WHAT", "MESSAGE", "DETAIL", wrap={"MESSAGE"})
    for entry in entries:
        rows.add_row(
            render.human_time(entry.at),
            entry.rule,
            entry.subject,
            entry.kind.value,
            entry.message,
            first_line(entry.detail, 60),
        )
    render.console().print(rows)


@alerts.command("silence")
@click.argument("rule", metavar="RULE")
@click.option(
    "--for",
    "duration",
    required=True,
    metavar="DURATION",
    help="How long: seconds, or like 30m, 2h, 1d; 0 ends the silence.",
)
@click.option("--reason", metavar="TEXT", help="Why (kept with the silence).")
@where_options()
@_json_option
def silence(rule: str, duration: str, reason: str | None, where: Where, as_json: bool) -> None:
    """Tell nobody about RULE (`*`: every rule of the namespace) for a while. Its alerts
    still fire and resolve in the history; one still firing when the silence ends is
    announced then."""
    made = _alerts(where, lambda service: service.silence(rule, duration, reason))
    if as_json:
        render.print_json(
            {"rule": rule, "silenced": made is not None}
            | ({} if made is None else _silence_json(made))
        )
    elif made is None:
        click.echo(f"alert rule {rule} is not silenced")
    else:
        click.echo(f"alert rule {rule} silenced until {render.human_time(made.until)} UTC")


@alerts.command("add")
@click.argument("kind", metavar="KIND", type=click.Choice(_KINDS))
@click.option("--name", metavar="NAME", help="The rule's name (default: the kind and scope).")
@click.option(
    "--threshold",
    metavar="N",
    help="queue-depth, dead-runs: runs; queue-age, scheduler-lag: seconds (or like 5m).",
)
@click.option("--count", type=int, metavar="N", help="job-failures: dead runs in a row (3).")
@click.option("--queue", metavar="QUEUE", help="Only this queue.")
@click.option("--job", metavar="JOB", help="job-failures: only this job.")
@click.option("--task", metavar="TASK", help="dead-runs: only this task.")
@click.option("--subscription", metavar="NAME", help="Only this subscription.")
@click.option("--worker", metavar="ID", help="worker-lost: only this worker.")
@click.option(
    "--repeat",
    default="1h",
    show_default=True,
    metavar="DURATION",
    help="Time between notices while it holds (0: once).",
)
@click.option("--webhook", "webhooks", multiple=True, metavar="URL", help="POST signed JSON.")
@click.option(
    "--secret", "secrets", multiple=True, metavar="WHSEC", help="Signing secret of the webhooks."
)
@click.option(
    "--email",
    "emails",
    multiple=True,
    metavar="ADDRESS",
    help="Send email (SMTP from CRONBUS_SMTP_HOST, _PORT, _FROM, _USER, _PASSWORD, _STARTTLS).",
)
@click.option("--chat", "chats", multiple=True, metavar="URL", help="Slack-compatible webhook.")
@where_options()
@_json_option
def add(
    kind: str,
    name: str | None,
    threshold: str | None,
    count: int | None,
    queue: str | None,
    job: str | None,
    task: str | None,
    subscription: str | None,
    worker: str | None,
    repeat: str,
    webhooks: tuple[str, ...],
    secrets: tuple[str, ...],
    emails: tuple[str, ...],
    chats: tuple[str, ...],
    where: Where,
    as_json: bool,
) -> None:
    """Store an alert rule of KIND with its destinations (at least one of --webhook,
    --email, --chat)."""
    if secrets and not webhooks:
        raise click.UsageError("--secret signs webhooks: give a --webhook too")
    destinations = [webhook(url, secret=list(secrets) or None) for url in webhooks]
    if emails:
        destinations.append(email(list(emails)))
    destinations.extend(chat(url) for url in chats)
    params: dict[str, Any] = {
        "threshold": threshold,
        "count": count,
        "queue": queue,
        "job": job,
        "task": task,
        "subscription": subscription,
        "worker": worker,
    }
    build_rule(kind, name=name, to=destinations, repeat=repeat, **params)  # refuse early
    made = _alerts(
        where,
        lambda service: service.add(kind, name=name, to=destinations, repeat=repeat, **params),
        create=True,
    )
    if as_json:
        render.print_json(_rule_json(made))
    else:
        click.echo(f"alert rule {made.name} added: {made.describe()}")


@alerts.command("remove")
@click.argument("name", metavar="NAME")
@where_options()
@_json_option
def remove(name: str, where: Where, as_json: bool) -> None:
    """Remove the stored alert rule NAME with its alerts and silence (its history stays)."""
    _alerts(where, lambda service: service.remove(name))
    if as_json:
        render.print_json({"name": name, "removed": True})
    else:
        click.echo(f"alert rule {name} removed")


# -- rendering -----------------------------------------------------------------------------
def _print_rules(rules: list[AlertRule], firing: list[AlertState], silences: list[Silence]) -> None:
    if not rules:
        click.echo("no alert rules")
    else:
        quiet = {s.rule: s for s in silences}
        rows = table("NAME", "RULE", "REPEAT", "SOURCE", "DESTINATIONS", "FIRING", "SILENCED")
        for rule in rules:
            hot = [s for s in firing if s.rule == rule.name and s.firing]
            until = quiet.get(rule.name) or quiet.get("*")
            rows.add_row(
                rule.name,
                rule.describe(),
                "once" if rule.repeat == 0 else f"{rule.repeat:g} s",
                rule.source,
                ", ".join(d.label for d in rule.destinations),
                str(len(hot)),
                "" if until is None else render.human_time(until.until),
            )
        render.console().print(rows)
    hot = [s for s in firing if s.firing]
    if hot:
        click.echo("")
        rows = table("RULE", "SUBJECT", "SINCE (UTC)", "MESSAGE", wrap={"MESSAGE"})
        for state in hot:
            rows.add_row(state.rule, state.subject, render.human_time(state.since), state.message)
        render.console().print(rows)


def _rule_json(rule: AlertRule) -> dict[str, Any]:
    shown = rule.public()
    shown["created_at"] = render.iso(rule.created_at)
    return shown


def _state_json(state: AlertState) -> dict[str, Any]:
    return {
        "rule": state.rule,
        "subject": state.subject,
        "namespace": state.namespace,
        "firing": state.firing,
        "since": render.iso(state.since),
        "message": state.message,
        "notified_at": render.iso(state.notified_at),
        "pending": len(state.pending),
    }


def _silence_json(silence: Silence) -> dict[str, Any]:
    return {
        "rule": silence.rule,
        "namespace": silence.namespace,
        "until": render.iso(silence.until),
        "reason": silence.reason,
        "created_at": render.iso(silence.created_at),
    }


def _entry_json(entry: HistoryEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": render.iso(entry.at),
        "rule": entry.rule,
        "subject": entry.subject,
        "namespace": entry.namespace,
        "kind": entry.kind.value,
        "message": entry.message,
        "detail": entry.detail,
    }
