"""The runs page's search box: qualifiers such as ``state:dead task:send args.user:42``.

:func:`parse` reads the text into a :class:`RunSearch` and :func:`format` writes one back, so
the search stays in the page's URL (``/runs?q=...``) and every link keeps it. Qualifiers:

``state:dead,failed``
    runs in one of these states (repeat it or list them with commas)
``task:NAME``, ``queue:NAME``, ``job:NAME``
    runs of a task, in a queue, fired by a job
``id:N``
    the run with this id (when it matches the rest too)
``args.KEY:VALUE``
    a keyword argument (``args.user:42``) or a positional one (``args.0:"a"``) equal to the
    value: a JSON number, ``true``, ``false`` or ``null``; a JSON string, list or object
    (``args.name:"Ada Lovelace"``, ``args.tags:["a","b"]``); any other word is text
    (``args.user:ada``). Equality is JSON's: ``42`` is not ``"42"``.
``created>:WHEN``, ``created<:WHEN``
    created at or after, or before, an ISO time (``2024-05-01``, ``2024-05-01T12:00Z``; UTC
    unless it says otherwise) or an age (``30m``, ``2h``, ``7d``, ``1w``: that long ago, counted
    from when the search runs, so a saved link keeps meaning "the last hour").

A value holding spaces (or starting with a quote or a bracket) is written as a JSON string:
``task:"odd name"``. Every mistake is an :class:`~cronbus.errors.InvalidArgumentError` with
``field="q"`` whose message says what to write instead. Nothing here reads the store.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import CronbusError, InvalidArgumentError
from ..model import check_match, check_match_depth
from ..serialization import MAX_DEPTH, TOO_DEEP
from ..services.context import check_id
from ..services.views import RunQuery
from ..states import RunState
from ..validation import check_label, check_queue, shorten

__all__ = ["QUALIFIERS", "RunSearch", "format", "parse"]

QUALIFIERS = ("state:", "task:", "queue:", "job:", "id:", "args.KEY:", "created>:", "created<:")
"""The qualifiers a search understands, as the help and the errors list them."""
FIELD = "q"
"""The form field errors are about."""
MAX_AGE = timedelta(days=36_525)
"""The oldest age ``created>:`` takes (100 years)."""
_AGE = re.compile(r"([1-9][0-9]{0,9})([smhdw])", re.ASCII)
_UNITS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", re.ASCII)
_SCALARS = {"true": True, "false": False, "null": None}
_INDEX = re.compile(r"0|[1-9][0-9]{0,5}", re.ASCII)
_QUOTED = ('"', "[", "{")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)

Bound = datetime | timedelta
"""A time bound: an instant, or an age (that long before the search runs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSearch:
    """A parsed search of runs: every part optional (empty: every run, newest first)."""

    states: tuple[RunState, ...] = ()
    task: str | None = None
    queue: str | None = None
    job: str | None = None
    id: int | None = None
    args: tuple[tuple[str, Any], ...] = ()
    """Payload matches, in the order given: (``user``, 42) or (``0``, "a")."""
    created_after: Bound | None = None
    created_before: Bound | None = None

    @property
    def empty(self) -> bool:
        """True when it asks for nothing in particular."""
        return self == RunSearch()

    def query(self, now: float | None = None) -> RunQuery:
        """The runs service's query; ages are counted back from ``now`` (default: now)."""
        at = time.time() if now is None else now
        return RunQuery(
            states=self.states,
            task=self.task,
            queue=self.queue,
            job=self.job,
            id=self.id,
            args=self.args,
            created_after=_resolve(self.created_after, at),
            created_before=_resolve(self.created_before, at),
        )


def parse(text: str) -> RunSearch:
    """A search from the text of the search box; :class:`InvalidArgumentError` (``field="q"``)
    saying what is wrong and what to write instead."""
    if not isinstance(text, str):
        raise _error(f"the search must be text, got {shorten(text)}")
    found: dict[str, Any] = {}
    states: list[RunState] = []
    args: dict[str, Any] = {}
    loose: list[str] = []
    for name, raw, value in _tokens(text):
        if name is None:
            loose.append(raw)
            continue
        key = name.lower()
        if key == "state":
            states.extend(s for s in _states(raw, value) if s not in states)
        elif key.startswith("args."):
            arg = _arg_key(name[len("args.") :])
            if arg in args:
                raise _error(f"args.{arg}: given twice; a run's argument has one value")
            args[arg] = _payload(arg, raw, value)
        elif key in ("task", "queue", "job", "id", "created>", "created<"):
            if key in found:
                raise _error(f"{key}: given twice; give it once")
            found[key] = _single(key, raw, value)
        else:
            raise _error(
                f"unknown qualifier {name + ':'!r}; the search understands {', '.join(QUALIFIERS)}"
            )
    if loose:
        raise _error(_loose(loose))
    return RunSearch(
        states=tuple(states),
        task=found.get("task"),
        queue=found.get("queue"),
        job=found.get("job"),
        id=found.get("id"),
        args=tuple(args.items()),
        created_after=found.get("created>"),
        created_before=found.get("created<"),
    )


def format(search: RunSearch) -> str:
    """The text of a search, as :func:`parse` reads it back (the same search)."""
    parts: list[str] = []
    if search.states:
        parts.append("state:" + ",".join(s.value for s in search.states))
    for name in ("task", "queue", "job"):
        value = getattr(search, name)
        if value is not None:
            parts.append(f"{name}:{_text(value)}")
    if search.id is not None:
        parts.append(f"id:{search.id}")
    parts.extend(f"args.{key}:{_json(value)}" for key, value in search.args)
    if search.created_after is not None:
        parts.append("created>:" + _bound(search.created_after))
    if search.created_before is not None:
        parts.append("created<:" + _bound(search.created_before))
    return " ".join(parts)


# -- reading ---------------------------------------------------------------------------------------
def _tokens(text: str) -> Iterator[tuple[str | None, str, Any]]:
    """Each word of ``text``: (qualifier, raw value, value). A bare word has no qualifier
    (None, the word, None). A value starting with a quote or a bracket is JSON, read whole
    (it may hold spaces); any other value runs to the next space and is kept as text."""
    i, end = 0, len(text)
    while i < end:
        if text[i].isspace():
            i += 1
            continue
        start = i
        while i < end and not text[i].isspace() and text[i] != ":":
            i += 1
        if i == end or text[i] != ":":
            yield None, text[start:i], None
            continue
        name = text[start:i]
        i += 1
        if i == end or text[i].isspace():
            raise _error(f"{name}: needs a value right after the colon, like {_example(name)}")
        if text[i] in _QUOTED:
            try:
                value, after = _DECODER.raw_decode(text, i)
            except RecursionError:
                # The decoder recurses per level: a value this deep is past MAX_DEPTH anyway.
                raise _error(
                    f"{name}: the value {TOO_DEEP}; a value nests at most {MAX_DEPTH} levels"
                ) from None
            except ValueError as exc:
                raise _error(
                    f"{name}: the value starting with {text[i]} is not valid JSON "
                    f'({_reason(exc)}); write strings as "text with spaces"'
                ) from None
            if after < end and not text[after].isspace():
                raise _error(
                    f"{name}: put a space after its value {shorten(text[i:after])} before "
                    f"{shorten(text[after:].split()[0])}"
                )
            yield name, text[i:after], value
            i = after
        else:
            start = i
            while i < end and not text[i].isspace():
                i += 1
            raw = text[start:i]
            yield name, raw, _SCALAR_MARK if _scalar(raw) else raw


class _Scalar:
    """Marks a bare word that reads as a JSON number, ``true``, ``false`` or ``null``."""


_SCALAR_MARK = _Scalar()


def _scalar(raw: str) -> bool:
    return raw in _SCALARS or _NUMBER.fullmatch(raw) is not None


def _text_of(name: str, raw: str, value: Any) -> str:
    """A qualifier's value as text (a bare word, or a JSON string)."""
    if value is _SCALAR_MARK:
        return raw
    if not isinstance(value, str):
        raise _error(f"{name}: takes text, got {shorten(raw)}; write {_example(name)}")
    return value


def _payload(key: str, raw: str, value: Any) -> Any:
    """An ``args.KEY:`` value: a bare JSON scalar read as JSON; a value the store could hold
    (finite numbers, integers within 64 bits)."""
    try:
        check_match_depth(key, value)  # first: the encoder below recurses
    except CronbusError as exc:
        raise _error(str(exc)) from None
    try:
        if value is _SCALAR_MARK:
            value = _SCALARS[raw] if raw in _SCALARS else json.loads(raw)
        json.dumps(value, allow_nan=False)
    except ValueError:
        raise _error(f"args.{key}: numbers must be finite, got {shorten(raw)}") from None
    try:
        check_match((key, value))
    except CronbusError as exc:
        raise _error(str(exc)) from None
    return value


def _states(raw: str, value: Any) -> list[RunState]:
    chosen = []
    for part in _text_of("state", raw, value).split(","):
        try:
            chosen.append(RunState(part.strip().lower()))
        except ValueError:
            allowed = ", ".join(s.value for s in RunState)
            raise _error(
                f"state:{shorten(part.strip())} is not a run state; the states are {allowed}"
            ) from None
    return chosen


def _single(key: str, raw: str, value: Any) -> Any:
    text = _text_of(key, raw, value)
    try:
        if key == "task":
            return check_label(text, "task:")
        if key == "job":
            return check_label(text, "job:")
        if key == "queue":
            return check_queue(text, "queue:")
    except CronbusError as exc:
        raise _error(str(exc)) from None
    if key == "id":
        if value is not _SCALAR_MARK or not text.isdigit():
            raise _error(f"id: takes a run id (a whole number), got {shorten(text)}")
        try:
            return check_id(int(text), "id:")
        except CronbusError as exc:
            raise _error(str(exc)) from None
    return _time(key, text)


def _arg_key(key: str) -> str:
    if key.isidentifier() or _INDEX.fullmatch(key):
        return key
    raise _error(
        f"args.{shorten(key)}: name a keyword argument (args.user:42) or a position from 0 "
        '(args.0:"a") after args.'
    )


def _time(key: str, text: str) -> Bound:
    age = _AGE.fullmatch(text)
    if age is not None:
        span = timedelta(seconds=int(age[1]) * _UNITS[age[2]])
        if span > MAX_AGE:
            raise _error(f"{key}:{text} is older than cronbus goes back; at most {MAX_AGE.days}d")
        return span
    try:
        stamp = datetime.fromisoformat(text)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        stamp = stamp.astimezone(UTC)
    except (ValueError, OverflowError):
        raise _error(
            f"{key}:{shorten(text)} is neither an ISO time (2024-05-01, 2024-05-01T12:00Z) nor "
            "an age (30m, 2h, 7d, 1w)"
        ) from None
    if stamp < _EPOCH:
        raise _error(f"{key}:{shorten(text)} is before 1970-01-01, when run times begin")
    return stamp


def _resolve(bound: Bound | None, now: float) -> float | None:
    if bound is None:
        return None
    if isinstance(bound, timedelta):
        return max(0.0, now - bound.total_seconds())
    return bound.timestamp()


# -- writing ---------------------------------------------------------------------------------------
def _text(value: str) -> str:
    """Text as a bare word when it reads back as the same text, else as a JSON string."""
    bare = (
        value
        and not value.startswith(_QUOTED)
        and not any(c.isspace() for c in value)
        and not _scalar(value)
    )
    return value if bare else json.dumps(value, ensure_ascii=False)


def _json(value: Any) -> str:
    if isinstance(value, str):
        return _text(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _bound(bound: Bound) -> str:
    if isinstance(bound, timedelta):
        seconds = int(bound.total_seconds())
        unit = next(u for u, size in _UNITS.items() if seconds % size == 0)
        return f"{seconds // _UNITS[unit]}{unit}"
    return bound.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- errors ----------------------------------------------------------------------------------------
def _error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message, field=FIELD)


def _example(name: str) -> str:
    key = name.lower()
    examples = {
        "state": "state:dead,failed",
        "task": "task:send_email",
        "queue": "queue:default",
        "job": "job:nightly",
        "id": "id:42",
        "created>": "created>:1h",
        "created<": "created<:2024-05-01",
    }
    if key.startswith("args."):
        return f'{name}:42 or {name}:"some text"'
    return examples.get(key, f'{name}:"value"')


def _loose(words: list[str]) -> str:
    """What to say of words without a qualifier, suggesting the likeliest one."""
    first = words[0]
    states = {s.value for s in RunState}
    if first.lower() in states:
        hint = f"state:{first.lower()}"
    elif first.lower().startswith("created"):
        hint = "created>:1h or created<:2024-05-01"
    elif first.isdigit():
        hint = f"id:{first}"
    else:
        hint = f"task:{first}"
    return (
        f"{shorten(' '.join(words))}: words need a qualifier; say {hint} (the search "
        f"understands {', '.join(QUALIFIERS)})"
    )


def _reason(exc: ValueError) -> str:
    message = getattr(exc, "msg", None) or str(exc)
    return str(message).rstrip(".")
