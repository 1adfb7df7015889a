"""The options that define a job on the command line (`cronbus jobs add|update`), parsed and
checked by Click before any store is opened: a trigger, arguments as JSON, and policies."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import click

from ..errors import CronbusError
from ..model import Misfire, Overlap
from ..serialization import parse_json
from ..task_policy import SHARDS_LIMIT
from ..validation import shorten

FC = TypeVar("FC", bound=Callable[..., Any])
TRIGGERS = ("cron", "every", "after", "at")


def _iso_time(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """Parse an ISO-8601 date-time; a naive one is read in --tz by the trigger."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{shorten(value)} is not an ISO-8601 date-time like 2026-05-01T12:00:00+02:00"
        ) from None


def _json_array(ctx: click.Context, param: click.Parameter, value: str) -> list[Any]:
    """Parse ``--args``: a JSON array of positional arguments."""
    parsed = _parse(value)
    if not isinstance(parsed, list):
        raise click.BadParameter(f"must be a JSON array, like '[1, \"a\"]'; got {shorten(value)}")
    return parsed


def _json_object(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, Any]:
    """Parse ``--kwargs``: a JSON object of keyword arguments."""
    parsed = _parse(value)
    if not isinstance(parsed, dict):
        raise click.BadParameter(
            f'must be a JSON object, like \'{{"to": "a"}}\'; got {shorten(value)}'
        )
    return parsed


def _parse(value: str) -> Any:
    try:
        return parse_json(value)
    except CronbusError as exc:
        raise click.BadParameter(str(exc)) from None


def _optional(parse: Callable[[click.Context, click.Parameter, str], Any]) -> Any:
    """A callback that leaves an option that was not given as None."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        return None if value is None else parse(ctx, param, value)

    return callback


_SECONDS = click.FloatRange(min=0, min_open=True)
_DEFINITION_OPTIONS = (
    click.option("--task", metavar="TASK", help="The task the job runs (a task of the --app)."),
    click.option("--cron", metavar="EXPR", help="Fire on a cron expression (5 or 6 fields)."),
    click.option("--every", type=_SECONDS, metavar="SECONDS", help="Fire at a fixed rate."),
    click.option(
        "--after", type=_SECONDS, metavar="SECONDS", help="Fire this long after each run ends."
    ),
    click.option("--at", callback=_iso_time, metavar="ISO-TIME", help="Fire once, at this time."),
    click.option("--tz", metavar="ZONE", help="IANA time zone of --cron and naive times [UTC]."),
    click.option("--start", callback=_iso_time, metavar="ISO", help="Fire no sooner than this."),
    click.option("--end", callback=_iso_time, metavar="ISO", help="Fire no later than this."),
    click.option(
        "--jitter",
        type=click.FloatRange(min=0),
        metavar="S",
        help="Spread each fire over up to this many seconds.",
    ),
    click.option(
        "--args",
        metavar="JSON-ARRAY",
        callback=_optional(_json_array),
        help="Positional arguments of the task, as a JSON array.",
    ),
    click.option(
        "--kwargs",
        metavar="JSON-OBJECT",
        callback=_optional(_json_object),
        help="Keyword arguments of the task, as a JSON object.",
    ),
    click.option(
        "--misfire",
        type=click.Choice([m.value for m in Misfire]),
        help="What to do about fires missed by more than the grace [once].",
    ),
    click.option(
        "--misfire-grace",
        type=click.FloatRange(min=0),
        metavar="S",
        help="How late a fire may be and still count as on time [1].",
    ),
    click.option(
        "--misfire-max",
        type=click.IntRange(min=1),
        metavar="N",
        help="With --misfire all, fire at most this many missed fires [100].",
    ),
    click.option(
        "--overlap",
        type=click.Choice([o.value for o in Overlap]),
        help="What a new run does while the previous one is still going [allow].",
    ),
    click.option(
        "--child",
        "children",
        multiple=True,
        metavar="NAME",
        help="A job to fire when a run succeeds; repeat for several.",
    ),
    click.option(
        "--calendar",
        "calendars",
        multiple=True,
        metavar="NAME",
        help="A calendar whose dates the job skips; repeat for several.",
    ),
    click.option(
        "--max-fires", type=click.IntRange(min=1), metavar="N", help="Stop after this many fires."
    ),
    click.option("--queue", metavar="QUEUE", help="Queue of the runs [the task's]."),
    click.option("--priority", type=int, metavar="N", help="Priority of the runs [the task's]."),
    click.option("--paused", is_flag=True, help="Store the job paused: it fires once resumed."),
    click.option(
        "--broadcast/--no-broadcast",
        default=None,
        help="Each fire is a parent run with one child per live worker that knows the task "
        "(--no-broadcast: one run per fire again).",
    ),
    click.option(
        "--shards",
        type=click.IntRange(0, SHARDS_LIMIT),
        metavar="N",
        help="Each fire is a parent run with N children, each told its shard index and N "
        "(0: no shards, one run per fire).",
    ),
)


def definition_options(fn: FC) -> FC:
    """Add the options that define a job (trigger, arguments, policies) to a command."""
    for option in reversed(_DEFINITION_OPTIONS):
        fn = option(fn)
    return fn


def job_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """The options given on the command line, as ``Jobs.add``/``Jobs.update`` take them.

    Options that were not given (None, an empty repeatable, a flag left off) are left out;
    ``--no-broadcast`` and ``--shards 0`` are given, as the fan-out turned off.
    """
    chosen = [kind for kind in TRIGGERS if given[kind] is not None]
    if len(chosen) > 1:
        raise click.UsageError(f"give one trigger, not {' and '.join(f'--{k}' for k in chosen)}")
    options = {k: v for k, v in given.items() if v is not None and v != () and v is not False}
    if given.get("broadcast") is False:
        options["broadcast"] = False
    if given.get("shards") == 0:
        options["shards"] = None
    return options
