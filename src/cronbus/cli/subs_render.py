"""Output of the `cronbus subs` and `cronbus dlq` commands: subscriptions, deliveries, attempts.

A subscription's state is one word: ``active``, ``paused`` (by a person), or ``disabled`` (paused
by cronbus, with the reason: a webhook that answered 410 Gone). Its lag is how many offsets of
its topic lie past its cursor. Webhook secrets are never printed, only how many there are;
header values and a URL's credentials and query values are masked, in tables and in ``--json``
alike (:mod:`cronbus.events.masking`).
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Collection, Sequence
from typing import Any

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from ..events.masking import short_url
from ..events.records import Delivery, DeliveryAttempt, Subscription
from ..events.states import DeliveryState
from ..services import SubscriptionView
from . import render

_STATE_STYLES = {"active": "green", "paused": "yellow", "disabled": "bold red"}
_DELIVERY_STYLES = {
    DeliveryState.PENDING: "blue",
    DeliveryState.IN_FLIGHT: "yellow",
    DeliveryState.ACKED: "green",
    DeliveryState.RETRY: "cyan",
    DeliveryState.DEAD: "bold red",
}
_MESSAGE_WIDTH = 80
_TARGET_WIDTH = 60
"""Characters of a webhook URL in the list's table at most (masked, without its scheme)."""
_MIN_TARGET = 16
_FILTER_WIDTH = 24


# -- JSON ----------------------------------------------------------------------------------------
def subscription_json(seen: SubscriptionView) -> dict[str, Any]:
    """A subscription as a JSON object (webhook secrets are not shown, only their count: the
    services mask the target before it leaves them)."""
    sub = seen.subscription
    return {
        "name": sub.name,
        "topic": sub.topic,
        "target": dict(sub.spec.target),
        "filter": sub.spec.filter,
        "policy": sub.spec.policy.to_json(),
        "origin": sub.spec.origin.value,
        "start": sub.spec.start,
        "state": seen.state,
        "disabled_reason": sub.disabled_reason,
        "cursor": sub.cursor,
        "topic_end": seen.topic_end,
        "lag": seen.lag,
        "holder": seen.holder,
        "lease_expires_at": render.iso(sub.lease_expires_at),
        "created_at": render.iso(sub.created_at),
        "updated_at": render.iso(sub.updated_at),
    }


def delivery_json(delivery: Delivery) -> dict[str, Any]:
    """A delivery as a JSON object (without its event)."""
    return {
        "id": delivery.id,
        "subscription": delivery.subscription,
        "topic": delivery.topic,
        "offset": delivery.offset,
        "event_id": delivery.event_id,
        "key": delivery.key,
        "state": delivery.state.value,
        "attempts": delivery.attempts,
        "due_at": render.iso(delivery.due_at),
        "last_status": delivery.last_status,
        "last_error": delivery.last_error,
        "last_response": delivery.last_response,
        "created_at": render.iso(delivery.created_at),
        "updated_at": render.iso(delivery.updated_at),
    }


def attempt_json(attempt: DeliveryAttempt) -> dict[str, Any]:
    """A delivery attempt as a JSON object."""
    return {
        "delivery_id": attempt.delivery_id,
        "number": attempt.number,
        "outcome": attempt.outcome.value,
        "status": attempt.status,
        "error": attempt.error,
        "response": attempt.response,
        "started_at": render.iso(attempt.started_at),
        "finished_at": render.iso(attempt.finished_at),
        "duration": round(attempt.finished_at - attempt.started_at, 6),
    }


# -- text ----------------------------------------------------------------------------------------
def subscription_state(sub: Subscription) -> str:
    """``active``, ``paused`` or ``disabled``."""
    if not sub.paused:
        return "active"
    return "disabled" if sub.disabled_reason else "paused"


def state_text(sub: Subscription) -> Text:
    """The subscription's state (active, paused, disabled with its reason), styled."""
    state = subscription_state(sub)
    text = Text(state, style=_STATE_STYLES[state])
    if sub.disabled_reason:
        text.append(f" ({sub.disabled_reason})")
    return text


def delivery_state_text(state: DeliveryState) -> Text:
    """A delivery state, coloured when the terminal shows colours."""
    return Text(state.value, style=_DELIVERY_STYLES.get(state, ""))


def target_summary(target: dict[str, Any], width: int = 2000) -> str:
    """A target in a few words: its masked URL (cut to ``width``), ``task NAME [queue Q]``, or
    ``handler NAME``."""
    kind = target.get("kind")
    if kind == "webhook":
        return short_url(str(target.get("url")), width)
    if kind == "task":
        queue = target.get("queue")
        return f"task {target.get('task')}" + (f" (queue {queue})" if queue else "")
    return f"{kind} {target.get(str(kind), '')}".strip()


def filter_summary(spec: dict[str, Any]) -> str:
    """A filter in one line: ``types=order.* source=shop data=amount,status``, or ``all``."""
    parts = [
        f"{key}={','.join(str(v) for v in spec[key])}"
        for key in ("types", "source", "subject")
        if spec.get(key)
    ]
    if spec.get("data"):
        parts.append("data=" + ",".join(spec["data"]))
    return " ".join(parts) or "all"


def print_subs(seen: Sequence[SubscriptionView]) -> None:
    """Print subscriptions as a table, with their lag behind the topic's end.

    The target gets the width the other columns leave (at least ``_MIN_TARGET``), so at 80
    columns the state is a whole word and the target a readable, masked, shortened URL.
    """
    out = render.console()
    columns = ("NAME", "STATE", "TOPIC", "TARGET", "FILTER", "CURSOR", "LAG", "HOLDER")
    cells = [
        (
            s.subscription.name,
            s.state,
            s.subscription.topic,
            s.subscription.spec.target,
            first_line(filter_summary(s.subscription.spec.filter), _FILTER_WIDTH),
            str(s.subscription.cursor),
            str(s.lag),
            _short_holder(s.holder),
        )
        for s in seen
    ]
    state_width = max(len(word) for word in _STATE_STYLES)
    others = sum(
        max(len(columns[i]), state_width if i == 1 else 0, *(len(str(row[i])) for row in cells))
        for i in range(len(columns))
        if columns[i] != "TARGET"
    )
    width = max(_MIN_TARGET, min(_TARGET_WIDTH, out.width - others - (len(columns) - 1)))
    rows = table(*columns, right=("CURSOR", "LAG"))
    rows.padding = (0, 1, 0, 0)  # one space between columns: room for the target
    rows.columns[1].min_width = state_width  # whole words, however narrow the terminal
    for name, state, topic, target, filters, cursor, lag, holder in cells:
        rows.add_row(
            name,
            Text(state, style=_STATE_STYLES[state]),
            topic,
            target_summary(target, width),
            filters,
            cursor,
            lag,
            holder,
        )
    out.print(rows)


def _short_holder(holder: str | None) -> str:
    """A dispatcher's id without its ``dispatcher-`` prefix (``subs show`` has it whole)."""
    if holder is None:
        return "-"
    return holder.removeprefix("dispatcher-")


def subscription_fields(seen: SubscriptionView, counts: dict[str, int]) -> Table:
    """Every field of one subscription, with its delivery counts, as a grid."""
    sub = seen.subscription
    policy = sub.spec.policy
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    target = sub.spec.target  # masked by the services
    rows: builtins.list[tuple[str, str]] = [
        ("topic", sub.topic),
        ("target", target["url"] if target.get("kind") == "webhook" else target_summary(target)),
    ]
    if target.get("kind") == "webhook":
        headers = ", ".join(f"{k}: {v}" for k, v in target.get("headers", {}).items())
        rows += [("headers", headers or "-"), ("secrets", str(target["secret_count"]))]
    rows += [
        ("filter", json.dumps(sub.spec.filter, ensure_ascii=False)),
        ("cursor", f"{sub.cursor} of {seen.topic_end} (lag {seen.lag})"),
        ("holder", seen.holder or "-"),
        ("origin", sub.spec.origin.value),
        ("start", sub.spec.start),
        ("policy", _policy_text(policy.to_json())),
        ("deliveries", ", ".join(f"{n} {state}" for state, n in counts.items())),
        ("created", render.human_time(sub.created_at)),
        ("updated", render.human_time(sub.updated_at)),
    ]
    for name, value in rows:
        grid.add_row(name, value)
    return grid


def _policy_text(policy: dict[str, Any]) -> str:
    def show(value: Any) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        return "-" if value is None else f"{value:g}"

    return ", ".join(f"{k.replace('_', '-')} {show(v)}" for k, v in policy.items())


def deliveries_table(found: Sequence[Delivery]) -> Table:
    """A table of deliveries, one per row."""
    columns = ("ID", "OFFSET", "EVENT ID", "STATE", "TRIES", "DUE (UTC)", "STATUS", "ERROR")
    rows = table(*columns, right=("ID", "OFFSET", "TRIES", "STATUS"), wrap=("ERROR",))
    for d in found:
        rows.add_row(
            str(d.id),
            str(d.offset),
            d.event_id,
            delivery_state_text(d.state),
            str(d.attempts),
            "" if d.state.terminal else render.human_time(d.due_at),
            "" if d.last_status is None else str(d.last_status),
            first_line(d.last_error),
        )
    return rows


def table(*columns: str, right: Collection[str] = (), wrap: Collection[str] = ()) -> Table:
    """A borderless table; ``right`` columns (numbers) are right-aligned, only ``wrap`` wrap."""
    out = Table(box=None, header_style="bold", pad_edge=False)
    for name in columns:
        justify: JustifyMethod = "right" if name in right else "left"
        out.add_column(name, justify=justify, no_wrap=name not in wrap, overflow="ellipsis")
    return out


def first_line(text: str | None, width: int = _MESSAGE_WIDTH) -> str:
    """The first line of a message, cut to ``width`` to fit a table."""
    line = text.strip().splitlines()[0] if text and text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def print_attempts(delivery: Delivery, found: Sequence[DeliveryAttempt]) -> None:
    """A delivery's state, then its attempts, oldest first."""
    out = render.console()
    out.print(
        Text.assemble(
            f"delivery {delivery.id} of {delivery.subscription}, offset {delivery.offset}  ",
            delivery_state_text(delivery.state),
        )
    )
    if not found:
        out.print("no attempts yet")
        return
    columns = ("#", "OUTCOME", "STARTED (UTC)", "SECONDS", "STATUS", "ERROR")
    rows = table(*columns, right=("#", "SECONDS", "STATUS"), wrap=("ERROR",))
    for attempt in found:
        rows.add_row(
            str(attempt.number),
            attempt.outcome.value,
            render.human_time(attempt.started_at),
            f"{attempt.finished_at - attempt.started_at:.3f}",
            "" if attempt.status is None else str(attempt.status),
            first_line(attempt.error),
        )
    out.print(rows)
