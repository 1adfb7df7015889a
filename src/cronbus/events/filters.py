"""Subscription filters: which events of a topic a subscription receives.

A :class:`Filter` is compiled once from a JSON spec (stored with its subscription) and then
answers :meth:`Filter.matches` without parsing anything per event. The spec, every key optional,
all of them required to match (an empty spec matches every event)::

    {
      "types":   ["order.*", "invoice.paid"],     # patterns on the event type, any of them
      "source":  "shop/*",                        # pattern(s) on the source
      "subject": ["orders/7", "orders/8"],        # pattern(s) on the subject
      "data": {                                   # conditions on fields of the JSON data
        "amount":   [{"numeric": [">", 100, "<=", 1000]}],
        "status":   ["paid", "shipped"],          # a list means any of its items
        "customer": {"tier": [{"anything-but": ["free"]}]},  # an object descends
        "email":    [{"suffix": "@example.com"}],
        "ref":      [{"prefix": "INV-"}],
        "coupon":   [{"exists": false}]
      }
    }

Patterns: ``*`` matches any run of characters, dots included, so ``order.*`` matches
``order.created`` and ``order.created.v2`` but not ``order``; ``*`` alone matches everything;
no other character is special. Conditions of ``data`` are described on :data:`OPERATORS` and in
``docs/events.md``. A bad spec raises :class:`~cronbus.errors.InvalidArgumentError` whose message
starts with the path of the offending part, e.g. ``filter.data.amount[0]: unknown operator``.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..errors import InvalidArgumentError
from .event import Event

Test = Callable[[Any], bool]
"""A compiled condition on a field that is present in the data."""

OPERATORS: Final = ("anything-but", "exists", "numeric", "prefix", "suffix", "wildcard")
"""The operators a data condition may use, as ``{"operator": argument}`` inside its list:

- ``prefix``, ``suffix``: a string field starts / ends with the argument;
- ``wildcard``: a string field matches the pattern (``*`` for any run of characters);
- ``numeric``: a number (not a boolean) satisfies every ``operator, bound`` pair, operators
  among ``=``, ``<``, ``<=``, ``>``, ``>=``;
- ``exists``: ``true`` if the field is present (even as ``null``), ``false`` if it is absent;
- ``anything-but``: the field is present and does not match the argument: a value, a list of
  values, or one ``prefix``/``suffix``/``wildcard`` object.

A plain value (string, number, boolean, ``null``) in the list matches an equal field. When the
field holds an array, a condition holds if it holds for one of its items (``anything-but``: if
the inner condition holds for none of them).
"""

_KEYS = ("types", "source", "subject", "data")
_MAX_DEPTH = 32
_COMPARE: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class _Missing:
    """The value of a field the data does not have."""


_MISSING: Final = _Missing()


class Filter:
    """A compiled subscription filter; see the module docstring for the spec it is built from.

    ``Filter()`` matches every event. Filters compare equal when their specs are equal.
    """

    __slots__ = ("_data", "_source", "_spec", "_subject", "_text", "_types")

    def __init__(
        self,
        *,
        types: str | Sequence[str] | None = None,
        source: str | Sequence[str] | None = None,
        subject: str | Sequence[str] | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """Compile a filter; each argument as in the JSON spec, None for no condition."""
        given = {"types": types, "source": source, "subject": subject}
        spec: dict[str, Any] = {}
        for name, value in given.items():
            if value is not None:
                spec[name] = _pattern_list(value, f"filter.{name}")
        if data is not None:
            spec["data"] = dict(data) if isinstance(data, Mapping) else data
        self._types = _patterns(spec.get("types"), "filter.types")
        self._source = _patterns(spec.get("source"), "filter.source")
        self._subject = _patterns(spec.get("subject"), "filter.subject")
        self._data = _data_checks(spec.get("data"))
        # The spec is kept as canonical text: to_json hands out fresh copies, and equality and
        # hashing need no deep comparison.
        self._text = json.dumps(spec, sort_keys=True, allow_nan=False)
        self._spec = spec

    @classmethod
    def from_json(cls, spec: Mapping[str, Any] | None) -> Filter:
        """Compile a filter from its JSON spec (None or ``{}`` match every event)."""
        if spec is None:
            return cls()
        if not isinstance(spec, Mapping):
            raise InvalidArgumentError(f"filter: expected an object, got {_show(spec)}")
        for name in spec:
            if name not in _KEYS:
                raise InvalidArgumentError(
                    f"filter: unknown key {name!r} (expected {', '.join(_KEYS)})"
                )
        return cls(**spec)

    def to_json(self) -> dict[str, Any]:
        """The spec this filter was built from, as a new JSON object (patterns as lists)."""
        result: dict[str, Any] = json.loads(self._text)
        return result

    def matches(self, event: Event) -> bool:
        """Whether ``event`` passes every condition of this filter."""
        if self._types is not None and not self._types(event.type):
            return False
        if self._source is not None and not self._source(event.source):
            return False
        if self._subject is not None and (
            event.subject is None or not self._subject(event.subject)
        ):
            return False
        return all(test(_lookup(event.data, path)) for path, test in self._data)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Filter):
            return NotImplemented
        return self._text == other._text

    def __hash__(self) -> int:
        return hash(self._text)

    def __repr__(self) -> str:
        return f"Filter.from_json({self._text})"


# -- patterns -------------------------------------------------------------------------------------


def glob(pattern: str) -> Callable[[str], bool]:
    """A test of whether a string matches ``pattern``, where ``*`` matches any run of characters.

    Matching is a left-to-right search for the literal parts, linear in the string: unlike a
    regular expression, a pattern with many ``*`` cannot make it backtrack.
    """
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern.__eq__
    first, middle, last = parts[0], parts[1:-1], parts[-1]

    def match(text: str) -> bool:
        end = len(text) - len(last)
        if end < len(first) or not text.startswith(first) or not text.endswith(last):
            return False
        position = len(first)
        for part in middle:
            found = text.find(part, position, end)
            if found < 0:
                return False
            position = found + len(part)
        return True

    return match


def _pattern_list(value: Any, path: str) -> list[Any]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    raise InvalidArgumentError(
        f"{path}: expected a pattern or a list of patterns, got {_show(value)}"
    )


def _patterns(value: list[Any] | None, path: str) -> Callable[[str], bool] | None:
    """One test for a list of patterns: any of them matches. None when there is no condition."""
    if value is None:
        return None
    if not value:
        raise InvalidArgumentError(f"{path}: an empty list matches nothing; leave the key out")
    for index, pattern in enumerate(value):
        if not isinstance(pattern, str) or not pattern:
            raise InvalidArgumentError(
                f"{path}[{index}]: expected a non-empty string, got {_show(pattern)}"
            )
    if "*" in value:
        return lambda text: True
    exact = frozenset(p for p in value if "*" not in p)
    wild = tuple(glob(p) for p in value if "*" in p)
    # Most patterns are exact names: one set lookup answers them all before any glob runs.
    return lambda text: text in exact or any(test(text) for test in wild)


# -- data conditions ------------------------------------------------------------------------------


def _data_checks(spec: Any) -> tuple[tuple[tuple[str, ...], Test], ...]:
    """Flatten the nested data spec into (field path, test) pairs, all of which must hold."""
    if spec is None:
        return ()
    if not isinstance(spec, dict):
        raise InvalidArgumentError(f"filter.data: expected an object, got {_show(spec)}")
    checks: list[tuple[tuple[str, ...], Test]] = []
    _collect(spec, (), "filter.data", checks)
    return tuple(checks)


def _collect(
    spec: dict[str, Any],
    path: tuple[str, ...],
    where: str,
    out: list[tuple[tuple[str, ...], Test]],
) -> None:
    if len(path) >= _MAX_DEPTH:
        raise InvalidArgumentError(f"{where}: nested deeper than {_MAX_DEPTH} levels")
    for name, value in spec.items():
        here = f"{where}.{name}"
        if isinstance(value, dict):
            if not value:
                raise InvalidArgumentError(f"{here}: an empty object has no condition")
            _collect(value, (*path, name), here, out)
        elif isinstance(value, list):
            out.append(((*path, name), _any_of(value, here)))
        else:
            raise InvalidArgumentError(f"{here}: {_leaf_hint(name, value)}")


def _leaf_hint(name: str, value: Any) -> str:
    """Why a bare value is refused, with the fix for the usual slip."""
    if name in OPERATORS:
        return (
            f"an operator goes inside a list: [{{{json.dumps(name)}: {_show(value)}}}], "
            "not as a field"
        )
    return f"expected a list of values or conditions, e.g. [{_show(value)}]"


def _any_of(items: list[Any], where: str) -> Test:
    """The test of one field: any item of its list holds. It receives _MISSING when absent."""
    if not items:
        raise InvalidArgumentError(f"{where}: an empty list matches nothing")
    values: list[Any] = []
    tests: list[Test] = []
    absent = False
    for index, item in enumerate(items):
        here = f"{where}[{index}]"
        if isinstance(item, dict):
            name, argument = _operator(item, here)
            if name == "exists":
                if not isinstance(argument, bool):
                    raise InvalidArgumentError(f"{here}.exists: expected true or false")
                if argument:
                    tests.append(_present)
                absent = absent or not argument
            else:
                tests.append(_BUILDERS[name](argument, f"{here}.{name}"))
        else:
            values.append(_scalar(item, here))
    if values:
        tests.insert(0, _equals(values))
    return _field_test(tuple(tests), absent)


def _field_test(tests: tuple[Test, ...], absent: bool) -> Test:
    def test(value: Any) -> bool:
        if value is _MISSING:
            return absent
        return any(t(value) for t in tests)

    return test


def _operator(item: dict[str, Any], where: str) -> tuple[str, Any]:
    if len(item) != 1:
        raise InvalidArgumentError(
            f"{where}: expected one operator per object, got {len(item)}; "
            "list several objects for any of them"
        )
    ((name, argument),) = item.items()
    if name not in OPERATORS:
        raise InvalidArgumentError(
            f"{where}: unknown operator {name!r} (expected one of {', '.join(OPERATORS)})"
        )
    return name, argument


def _scalar(value: Any, where: str) -> Any:
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    raise InvalidArgumentError(
        f"{where}: expected a string, number, boolean, null or {{operator: argument}}, "
        f"got {_show(value)}"
    )


def _kind(value: Any) -> tuple[int, Any]:
    """A key under which only JSON-equal scalars are equal: ``true`` is not ``1`` here."""
    if isinstance(value, bool):
        return (1, value)
    if isinstance(value, int | float):
        return (2, value)
    return (3, value) if isinstance(value, str) else (0, value)


def _each(test: Test) -> Test:
    """Apply ``test`` to a field, or to the items of a field holding an array."""

    def run(value: Any) -> bool:
        if isinstance(value, list):
            return any(test(item) for item in value)
        return test(value)

    return run


def _present(value: Any) -> bool:
    return True


def _equals(values: list[Any]) -> Test:
    keys = frozenset(_kind(v) for v in values)
    hashable = (str, int, float, bool, type(None))
    return _each(lambda value: isinstance(value, hashable) and _kind(value) in keys)


def _string_argument(argument: Any, where: str) -> str:
    if not isinstance(argument, str):
        raise InvalidArgumentError(f"{where}: expected a string, got {_show(argument)}")
    return argument


def _prefix(argument: Any, where: str) -> Test:
    prefix = _string_argument(argument, where)
    return _each(lambda value: isinstance(value, str) and value.startswith(prefix))


def _suffix(argument: Any, where: str) -> Test:
    suffix = _string_argument(argument, where)
    return _each(lambda value: isinstance(value, str) and value.endswith(suffix))


def _wildcard(argument: Any, where: str) -> Test:
    match = glob(_string_argument(argument, where))
    return _each(lambda value: isinstance(value, str) and match(value))


def _numeric(argument: Any, where: str) -> Test:
    if not isinstance(argument, list) or not argument or len(argument) % 2:
        raise InvalidArgumentError(
            f"{where}: expected pairs of operator and bound, e.g. ['>', 0, '<=', 5], "
            f"got {_show(argument)}"
        )
    checks: list[tuple[Callable[[Any, Any], bool], float]] = []
    for index in range(0, len(argument), 2):
        symbol, bound = argument[index], argument[index + 1]
        if symbol not in _COMPARE:
            raise InvalidArgumentError(
                f"{where}[{index}]: unknown comparison {_show(symbol)} "
                f"(expected one of {', '.join(_COMPARE)})"
            )
        if not _is_number(bound) or not math.isfinite(bound):
            raise InvalidArgumentError(
                f"{where}[{index + 1}]: expected a number, got {_show(bound)}"
            )
        checks.append((_COMPARE[symbol], bound))
    frozen = tuple(checks)
    return _each(lambda value: _is_number(value) and all(op(value, b) for op, b in frozen))


def _anything_but(argument: Any, where: str) -> Test:
    inner: Test
    if isinstance(argument, dict):
        name, value = _operator(argument, where)
        if name not in ("prefix", "suffix", "wildcard"):
            raise InvalidArgumentError(
                f"{where}: anything-but takes a value, a list of values, or one prefix, "
                f"suffix or wildcard object, not {name!r}"
            )
        inner = _BUILDERS[name](value, f"{where}.{name}")
    elif isinstance(argument, list):
        if not argument:
            raise InvalidArgumentError(f"{where}: an empty list excludes nothing")
        inner = _equals([_scalar(v, f"{where}[{i}]") for i, v in enumerate(argument)])
    else:
        inner = _equals([_scalar(argument, where)])
    # Only called for present fields (_field_test answers absent ones), so this is exactly
    # the complement of the inner condition among present fields.
    return lambda value: not inner(value)


_BUILDERS: Final[dict[str, Callable[[Any, str], Test]]] = {
    "anything-but": _anything_but,
    "numeric": _numeric,
    "prefix": _prefix,
    "suffix": _suffix,
    "wildcard": _wildcard,
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _lookup(data: Any, path: tuple[str, ...]) -> Any:
    """The field at ``path`` in ``data``, or _MISSING; only objects are descended into."""
    value = data
    for name in path:
        if not isinstance(value, dict):
            return _MISSING
        value = value.get(name, _MISSING)
    return value


def _show(value: Any) -> str:
    """A value as JSON in an error message, or its Python repr when it is not JSON."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
