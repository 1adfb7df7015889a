"""JSON at the edge: arguments and results are checked once, where they enter cronbus."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import InvalidArgumentError, SerializationError

_JSON_KINDS = "str, int, float, bool, None, list or dict with str keys"


def dumps(value: Any) -> str:
    """Encode strict JSON (no NaN or infinity), compactly."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def encode_value(value: Any, what: str) -> str:
    """Encode ``value`` or raise :class:`SerializationError` naming ``what`` it is."""
    try:
        return dumps(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"{what} is not JSON ({_reason(value, exc)}); pass only {_JSON_KINDS}"
        ) from None


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``fn``'s signature, or None for callables without one (some builtins)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def encode_call(
    signature: inspect.Signature | None,
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> tuple[str, str]:
    """Check a call against the task's signature and encode its arguments, naming a bad one.

    The whole argument list is encoded at once; only when that fails is each argument tried
    alone, to say which one is not JSON.
    """
    bound = None
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentError(
                f"task {task!r} cannot take these arguments: {exc}"
            ) from None
    try:
        return dumps(list(args)), dumps(dict(kwargs))
    except (TypeError, ValueError):
        pass
    names = _names(bound, len(args))
    for index, value in enumerate(args):
        encode_value(value, f"argument {names[index]} of task {task!r}")
    for key, value in kwargs.items():
        encode_value(value, f"argument {key!r} of task {task!r}")
    raise SerializationError(f"the arguments of task {task!r} are not JSON")  # pragma: no cover


def _names(bound: inspect.BoundArguments | None, count: int) -> list[str]:
    names = [f"#{i}" for i in range(count)]
    if bound is None:
        return names
    params = list(bound.signature.parameters.values())
    for i in range(count):
        if i < len(params) and params[i].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            names[i] = repr(params[i].name)
    return names


def _reason(value: Any, exc: Exception) -> str:
    if isinstance(exc, ValueError) and "Out of range float" in str(exc):
        return "NaN and infinity have no JSON form"
    bad = _first_bad(value)
    return f"{type(bad).__name__} cannot be encoded"


def _first_bad(value: Any) -> Any:
    """The innermost value that JSON refuses, to name it in the error."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                return key
            try:
                dumps(item)
            except (TypeError, ValueError):
                return _first_bad(item)
    elif isinstance(value, list | tuple):
        for item in value:
            try:
                dumps(item)
            except (TypeError, ValueError):
                return _first_bad(item)
    return value
