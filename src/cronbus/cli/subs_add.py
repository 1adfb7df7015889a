"""`cronbus subs add`: subscribe a webhook or a task to a topic.

Every definition is checked (target, filter, policy) before the store is opened, so a refused
``add`` leaves no trace. A webhook URL is checked against the network policy
(:mod:`cronbus.events.netpolicy`) here too; what ``--json`` prints is masked like every other
view of a subscription.
"""

from __future__ import annotations

import re
from typing import Any

import click

from ..errors import InvalidArgumentError, SerializationError, SubscriptionExistsError
from ..events.bus import build_filter, build_policy, check_name
from ..events.event import validate_topic
from ..events.targets import check_target, check_url
from ..serialization import parse_json
from ..services import SubscriptionInput, SubscriptionView
from ..validation import shorten
from . import render
from .connect import AnyServices, Where, run_services, where_options
from .loading import CliError, load_app
from .subs_render import subscription_json

_HEADER = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+):(.*)")

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
)
name_argument = click.argument("name", metavar="NAME")


def _split(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    """Read an option given several times, comma separated, or both."""
    parts = [part.strip() for value in values for part in value.split(",")]
    if not all(parts):
        raise click.BadParameter(f"an empty value in {', '.join(map(repr, values))}")
    return parts


def _headers(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for value in values:
        match = _HEADER.fullmatch(value)
        if match is None:
            # Not echoed: a malformed header may still hold a credential.
            raise click.BadParameter(
                "that is not a header like 'X-Team: billing' (NAME: VALUE; not shown, since "
                "it may hold a credential)"
            )
        headers[match[1]] = match[2].strip()
    return headers


def _webhook(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_url(value)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc)) from None


def _filter(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        spec = parse_json(value, shorten(value))
    except SerializationError as exc:
        raise click.BadParameter(str(exc)) from None
    if not isinstance(spec, dict):
        raise click.BadParameter('must be a JSON object, like \'{"types": ["order.*"]}\'')
    return spec


@click.command("add")
@name_argument
@click.option("--topic", required=True, help="The topic to read.")
@click.option(
    "--types",
    multiple=True,
    callback=_split,
    metavar="PATTERN",
    help="Only events whose type matches, like 'order.*'; repeat it or separate with commas.",
)
@click.option("--source", "sources", multiple=True, callback=_split, help="Only this source.")
@click.option("--subject", "subjects", multiple=True, callback=_split, help="Only this subject.")
@click.option(
    "--filter",
    "filter_spec",
    metavar="JSON",
    callback=_filter,
    help="A full filter as JSON (docs/events.md), e.g. data conditions; --types, --source and "
    "--subject replace its keys of the same name.",
)
@click.option(
    "--webhook",
    metavar="URL",
    callback=_webhook,
    help="POST each event to this http(s) URL. Redirects are not followed; link-local, cloud "
    "metadata, unspecified and multicast addresses are refused (CRONBUS_WEBHOOK_DENY and "
    "CRONBUS_WEBHOOK_ALLOW change that).",
)
@click.option(
    "--secret",
    "secrets",
    multiple=True,
    metavar="whsec_...",
    help="Sign webhooks with this secret (Standard Webhooks); repeat it to rotate secrets.",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    callback=_headers,
    metavar="'NAME: VALUE'",
    help="Send this header with each webhook; repeatable. Values are masked wherever the "
    "subscription is shown.",
)
@click.option("--task", metavar="NAME", help="Create a run of this task for each event.")
@click.option("--queue", help="The queue of those runs (default: the task's).")
@click.option(
    "--start",
    type=click.Choice(["latest", "earliest"]),
    default="latest",
    show_default=True,
    help="Deliver events published from now on, or the whole topic.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Longest one push may take before it is interrupted and counted failed [default: 10].",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=1),
    metavar="N",
    help="Deliveries of this subscription pushed at once, at most [default: 16].",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    metavar="N",
    help="Attempts before a delivery becomes a dead letter [default: 8].",
)
@click.option(
    "--backoff",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="First retry delay, doubled each retry with jitter, up to 300 s [default: 1].",
)
@click.option(
    "--rate-limit",
    type=click.FloatRange(min=0, min_open=True),
    metavar="PER-SECOND",
    help="Deliveries per second at most.",
)
@click.option("--ordered", is_flag=True, help="Keep order per event key (or subject).")
@click.option(
    "--replace", is_flag=True, help="Redefine an existing subscription (its cursor is kept)."
)
@where_options()
@json_option
def add(
    name: str,
    topic: str,
    types: list[str],
    sources: list[str],
    subjects: list[str],
    filter_spec: dict[str, Any],
    webhook: str | None,
    secrets: tuple[str, ...],
    headers: dict[str, str],
    task: str | None,
    queue: str | None,
    start: str,
    replace: bool,
    where: Where,
    as_json: bool,
    **policy: Any,
) -> None:
    """Subscribe a webhook or a task to the events of a topic.

    Delivery options not given keep their defaults: --timeout 10, --max-in-flight 16,
    --max-attempts 8, --backoff 1 (doubled each retry), no rate limit, unordered.
    """
    options = {k: v for k, v in policy.items() if v is not None and v is not False}
    target = _target(webhook, list(secrets), headers, task, queue)
    # Checked before the store is opened (add() checks them again, cheaply).
    check_name(name)
    validate_topic(topic)
    check_target(target)
    spec = build_filter(types or None, sources or None, subjects or None, filter=filter_spec)
    build_policy(**options)
    if task is not None and where.app_spec is not None:
        load_app(where.app_spec).get_task(task)  # the app at hand knows its tasks
    given = SubscriptionInput(
        name=name,
        topic=topic,
        webhook=webhook,
        secrets=list(secrets),
        headers=headers,
        task=task,
        queue=queue,
        filter=spec,
        start=start,
        replace_existing=replace,
        **options,
    )

    async def create(services: AnyServices) -> SubscriptionView:
        # The store's insert decides: the same definition again is a no-op, another one is
        # refused, so two concurrent adds of one name cannot overwrite each other.
        try:
            return await services.subscriptions.create(given)
        except SubscriptionExistsError:
            raise CliError(
                f"a subscription named {name!r} exists with another definition; "
                "use --replace to redefine it"
            ) from None

    seen = run_services(where, create)
    if as_json:
        render.print_json(subscription_json(seen))
    else:
        click.echo(f"subscription {name} on {topic}, cursor at offset {seen.subscription.cursor}")


def _target(
    webhook: str | None,
    secrets: list[str],
    headers: dict[str, str],
    task: str | None,
    queue: str | None,
) -> dict[str, Any]:
    """The target the options describe; refuses both, neither, and options of the other kind."""
    if webhook is not None and task is not None:
        raise click.UsageError("give one target, --webhook or --task, not both")
    if webhook is None and task is None:
        raise click.UsageError("give a target: --webhook URL or --task NAME")
    if webhook is not None:
        if queue is not None:
            raise click.UsageError("--queue goes with --task, not --webhook")
        return {"kind": "webhook", "url": webhook, "headers": headers, "secrets": secrets}
    if secrets or headers:
        raise click.UsageError("--secret and --header go with --webhook, not --task")
    return {"kind": "task", "task": task, "queue": queue}
