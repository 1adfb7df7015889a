"""JSON at the edge: arguments, event data and results are checked once, where they enter cronbus.

One pass over a value (:func:`check_json`) refuses, naming where in the value it is: a type
JSON has no form for, a dict key that is not a string (``json`` would turn ``{1: 2}`` into
``{"1": 2}`` without a word), NaN and infinity, a string with a NUL character or a lone
surrogate (no store keeps them as text), nesting deeper than :data:`MAX_DEPTH`, and more than a
payload limit of serialized bytes (``Settings.max_payload_bytes``, 1 MiB by default). The same
pass estimates the encoded size from below, so a 200 MB string is refused before it is copied.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import InvalidArgumentError, SerializationError
from .validation import UNSTORABLE, shorten, unstorable_reason

JSON_KINDS = "str, int, float, bool, None, list or dict with str keys"
MAX_DEPTH = 100
"""Lists and dicts nest at most this deep (JSON decoders recurse, so deeper is a trap)."""
TOO_DEEP = f"nests more than {MAX_DEPTH} levels deep"
"""How errors say that a value passes :data:`MAX_DEPTH` (:func:`too_deep`)."""
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
"""Serialized JSON bytes of a run's arguments or an event's data, unless settings say more."""
PAYLOAD_SETTING = "max_payload_bytes (CRONBUS_MAX_PAYLOAD_BYTES)"
CONTEXT_PARAMETER = "ctx"
"""A task function's parameter that receives the run context instead of an argument."""
_unstorable = UNSTORABLE.search


def dumps(value: Any) -> str:
    """Encode strict JSON (no NaN or infinity), compactly.

    Raises :class:`SerializationError` (a ``TypeError``) for text with a lone surrogate, which
    would otherwise fail later, in the store, as a ``UnicodeEncodeError``.
    """
    if value is None:
        return "null"  # what most tasks return
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    reason = unstorable_reason(text)
    if reason is not None and "surrogate" in reason:
        raise SerializationError(f"the value is not storable JSON: its text {reason}")
    return text


class _Bad(Exception):
    """Where a walk stopped: the reason, the bad part, and its path (built on the way out)."""

    def __init__(self, reason: str, value: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.value = value
        self.path: list[str | int] = []


class _TooBig(Exception):
    """The size estimate passed the limit: stop walking at once."""


class _Walk:
    """One pass over a JSON value; ``size`` ends as a lower bound of its encoded bytes."""

    __slots__ = ("limit", "size")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.size = 0

    def add(self, amount: int) -> None:
        self.size += amount
        if self.limit is not None and self.size > self.limit:
            raise _TooBig

    def walk(self, value: Any, depth: int) -> None:
        # The common exact types first, by identity of type: this runs once per value.
        kind = type(value)
        if kind is str:
            self.add(len(value) + 2)  # checked before the scan, so a huge string costs nothing
            if _unstorable(value) is not None:
                self.text(value)
        elif kind is int or kind is bool or value is None:
            self.size += 4
        elif kind is float or isinstance(value, float):
            if not math.isfinite(value):
                raise _Bad("NaN and infinity have no JSON form", value)
            self.size += 1
        elif isinstance(value, dict):
            self.nested(depth)
            self.add(2)
            for key, item in value.items():
                self.member(key, item, depth)
        elif isinstance(value, list | tuple):
            self.nested(depth)
            self.add(len(value) + 1)
            for index, item in enumerate(value):
                try:
                    self.walk(item, depth + 1)
                except _Bad as bad:
                    bad.path.insert(0, index)
                    raise
        elif isinstance(value, str):  # a str subclass (a StrEnum): JSON writes its value
            self.add(len(value) + 2)
            self.text(value)
        elif isinstance(value, int):  # bool and IntEnum included
            self.size += 1
        else:
            raise _Bad(f"{type(value).__name__} cannot be encoded", value)

    def member(self, key: Any, item: Any, depth: int) -> None:
        try:
            if not isinstance(key, str):
                raise _Bad(
                    f"a dict key must be a string, not {type(key).__name__} (JSON would turn it "
                    "into text)",
                    key,
                )
            self.add(len(key) + 3)
            if _unstorable(key) is not None:
                self.text(key)
            self.walk(item, depth + 1)
        except _Bad as bad:
            if isinstance(key, str):  # a bad key is the value shown, not a step of the path
                bad.path.insert(0, key)
            raise

    def nested(self, depth: int) -> None:
        # The bound of too_deep, met on the way down: containers at depths 0 to MAX_DEPTH - 1.
        if depth >= MAX_DEPTH:
            raise _Bad(f"lists and dicts nest more than {MAX_DEPTH} levels deep", "...")

    @staticmethod
    def text(value: str) -> None:
        reason = unstorable_reason(value)
        if reason is not None:
            raise _Bad(f"a string {reason}", value)


def check_json(value: Any, what: str, *, max_bytes: int | None = None) -> int:
    """Check that ``value`` is storable JSON (see the module docstring); return a lower bound
    of its encoded size. ``what`` names the value in errors, like ``"argument 'to' of task
    'send'"``."""
    walk = _Walk(max_bytes)
    _check(walk, value, what, what)
    return walk.size


def _check(walk: _Walk, value: Any, what: str, whole: str) -> None:
    """Walk ``value`` (named ``what``) on ``walk``, whose budget is that of ``whole``."""
    try:
        walk.walk(value, 0)
    except _Bad as bad:
        where = "".join(f"[{shorten(p, 30)}]" for p in bad.path)
        at = f" at {where}" if where else ""
        raise SerializationError(
            f"{what} is not JSON{at}: {bad.reason}, got {shorten(bad.value)}; pass only "
            f"{JSON_KINDS}"
        ) from None
    except _TooBig:
        assert walk.limit is not None
        raise too_big(whole, walk.size, walk.limit, at_least=True) from None


def too_big(what: str, size: int, limit: int, *, at_least: bool = False) -> InvalidArgumentError:
    """The error for a payload over its limit."""
    more = "more than " if at_least else ""
    return InvalidArgumentError(
        f"{what} is {more}{size:,} bytes of JSON, over the limit of {limit:,} bytes "
        f"(raise {PAYLOAD_SETTING} to allow more)"
    )


def encode_value(value: Any, what: str, *, max_bytes: int | None = None) -> str:
    """Check and encode ``value``; errors name ``what`` it is and where in it the fault is."""
    check_json(value, what, max_bytes=max_bytes)
    return _encode(value, what, max_bytes)


def _encode(value: Any, what: str, max_bytes: int | None) -> str:
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:  # a huge int, a custom subclass
        raise SerializationError(f"{what} is not JSON ({shorten(str(exc))})") from None
    if max_bytes is not None:
        size = len(text.encode("utf-8")) if len(text) * 4 > max_bytes else len(text)
        if size > max_bytes:
            raise too_big(what, size, max_bytes)
    return text


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``fn``'s signature as its runs are called, or None for callables without one (some
    builtins). A parameter named ``ctx`` (:data:`CONTEXT_PARAMETER`) is left out: the worker
    passes the run context there, and it is not part of the run's arguments."""
    full = _full_signature(fn)
    if full is None or CONTEXT_PARAMETER not in full.parameters:
        return full
    kept = [p for p in full.parameters.values() if p.name != CONTEXT_PARAMETER]
    return full.replace(parameters=kept)


def context_parameter(fn: Callable[..., Any]) -> inspect.Parameter | None:
    """``fn``'s parameter named ``ctx``, where a task receives its run context, if any."""
    full = _full_signature(fn)
    return None if full is None else full.parameters.get(CONTEXT_PARAMETER)


def _full_signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def encode_call(
    signature: inspect.Signature | None,
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    max_bytes: int | None = None,
) -> tuple[str, str]:
    """Check a call against the task's signature and encode its arguments, naming a bad one.

    ``max_bytes`` bounds the arguments' encoded JSON, positional and keyword together.
    """
    if signature is not None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentError(
                f"task {task!r} cannot take these arguments: {shorten(str(exc), 200)}"
            ) from None
    names = _names(signature, len(args))
    what = f"the arguments of task {task!r}"
    walk = _Walk(max_bytes)  # one budget for all the arguments
    for index, value in enumerate(args):
        _check(walk, value, f"argument {names[index]} of task {task!r}", what)
    for key, value in kwargs.items():
        label = f"argument {shorten(key, 40)} of task {task!r}"
        reason = unstorable_reason(key) if isinstance(key, str) else "is not a string"
        if reason is not None:
            raise SerializationError(f"the name of {label} {reason}")
        _check(walk, value, label, what)
    args_json = _encode(list(args), what, max_bytes)
    kwargs_json = _encode(dict(kwargs), what, max_bytes)
    if max_bytes is not None:
        total = len(args_json.encode("utf-8")) + len(kwargs_json.encode("utf-8"))
        if total > max_bytes:
            raise too_big(what, total, max_bytes)
    return args_json, kwargs_json


def too_deep(value: Any) -> bool:
    """Whether lists and dicts nest in ``value`` more than :data:`MAX_DEPTH` levels deep: the
    one bound of a stored argument and of a match against one (a deeper match could equal no
    stored value). Found level by level, without recursion, so any depth gets an answer."""
    level = [value]
    depth = 0
    while True:
        containers = [item for item in level if isinstance(item, list | tuple | dict)]
        if not containers:
            return False
        depth += 1
        if depth > MAX_DEPTH:
            return True
        level = [
            child
            for item in containers
            for child in (item.values() if isinstance(item, dict) else item)
        ]


def parse_json(text: str, what: str | None = None) -> Any:
    """Parse JSON a user typed (``--args``, ``--data``...), refusing NaN, Infinity and nesting
    too deep for a decoder, with an error that names ``what`` it is (by default, the text
    itself, shortened)."""
    what = shorten(text) if what is None else what
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise SerializationError(f"{what} nests too deeply to be read as JSON") from None
    except ValueError as exc:
        raise SerializationError(f"{what} is not JSON ({exc})") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _names(signature: inspect.Signature | None, count: int) -> list[str]:
    names = [f"#{i}" for i in range(count)]
    if signature is None:
        return names
    params = list(signature.parameters.values())
    for i in range(count):
        if i < len(params) and params[i].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            names[i] = repr(params[i].name)
    return names
