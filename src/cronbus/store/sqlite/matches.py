"""Payload matches of a run listing (:attr:`cronbus.model.RunFilter.args`) in SQLite's SQL.

A payload is JSON text in ``run_payloads``; SQLite reads a JSON ``true`` as 1 and an object
back as text in its stored key order, so values are not compared as SQLite values: each match
finds the argument with ``json_each`` and compares the element's JSON type and atom (a scalar),
or, for a list or an object, hands its JSON text to :func:`json_equals` (a function of the
connection, :func:`register`), which is JSON equality (``42`` is ``42.0``, never ``"42"``;
``true`` is not ``1``; ``{"a": 1, "b": 2}`` is ``{"b": 2, "a": 1}``). A stored NUL is read as
U+FFFD, as PostgreSQL's store reads it (see :func:`readable`).

Lists and objects are not compared level by level in SQL: that took one nested ``EXISTS`` per
level of the value, and SQLite's parser overflows its stack from about 8 levels ("parser stack
overflow"), while a match may nest as deep as an argument (:data:`cronbus.serialization.
MAX_DEPTH`). SQL only sieves them (their member count and a few scalar members of the first
level, one level of ``EXISTS``) before the function compares the rest, so the statement keeps
one shape at every depth and the function runs only for the few payloads that pass the sieve.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ...model import JSON

_EMPTY = {"array": "[]", "object": "{}"}
_SIEVE = 8
"""Scalar members of a list or object match tested in SQL before the whole comparison."""
JSON_EQUALS = "cronbus_json_equals"
"""The SQL name of :func:`json_equals` on every connection of the store."""


def payload_condition(matches: Sequence[tuple[str, JSON]]) -> tuple[str, list[Any]]:
    """The condition on a run ``r`` that its payload meets every match, with its parameters
    (one probe of ``run_payloads`` by primary key, whichever index the listing walks)."""
    params: list[Any] = []
    tests = []
    for index, (key, value) in enumerate(matches):
        column, label = ("m.args", int(key)) if positional(key) else ("m.kwargs", key)
        column = readable(column)
        alias = f"j{index}"
        params.append(label)
        inner = _equals(alias, value, params)
        tests.append(
            f"EXISTS (SELECT 1 FROM json_each({column}) AS {alias} "
            f"WHERE {alias}.key = ? AND {inner})"
        )
    where = " AND ".join(tests)
    return f"EXISTS (SELECT 1 FROM run_payloads AS m WHERE m.run_id = r.id AND {where})", params


def readable(column: str) -> str:
    """``column`` with each escaped NUL read as U+FFFD: SQLite's JSON functions end a string at
    a NUL (``"\u0000x"`` would equal ``""``), and PostgreSQL's refuse it, so both stores read a
    stored NUL so (a match cannot hold one). Found by ``instr`` first: such payloads are rare."""
    # Escaped backslashes are set aside first (as char(1), which JSON text never holds raw), so
    # that each \u0000 left is an escape of its own, not text after an escaped backslash.
    setaside = rf"replace({column}, '\\', char(1))"
    return (
        rf"iif(instr({column}, '\u0000'), "
        rf"replace(replace({setaside}, '\u0000', '\ufffd'), char(1), '\\'), {column})"
    )


def positional(key: str) -> bool:
    """Whether a match's key names a positional argument (digits only) rather than a keyword."""
    return key.isascii() and key.isdigit()


def _equals(alias: str, value: JSON, params: list[Any]) -> str:
    """The condition that the JSON element ``alias`` (a row of ``json_each``) equals ``value``."""
    if value is None:
        return f"{alias}.type = 'null'"
    if isinstance(value, bool):
        return f"{alias}.type = '{'true' if value else 'false'}'"
    if isinstance(value, int | float):
        params.append(value)
        return f"{alias}.type IN ('integer', 'real') AND {alias}.atom = ?"
    if isinstance(value, str):
        params.append(value)
        return f"{alias}.type = 'text' AND {alias}.atom = ?"
    return _container(alias, value, params)


def _container(alias: str, value: list[JSON] | dict[str, JSON], params: list[Any]) -> str:
    """A list or an object: compared whole by :func:`json_equals`, after cheap tests in SQL
    that turn most payloads away first (the member count, and up to :data:`_SIEVE` scalar
    members of the first level: one level of ``EXISTS``, whatever the value's depth)."""
    kind = "object" if isinstance(value, dict) else "array"
    items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    # ``value`` is JSON text only for arrays and objects (a string's is the bare text, which
    # json_each would refuse), so other elements are walked as an empty container instead.
    members = f"json_each(iif({alias}.type = '{kind}', {alias}.value, '{_EMPTY[kind]}'))"
    params.append(len(items))
    tests = [f"{alias}.type = '{kind}'", f"(SELECT count(*) FROM {members}) = ?"]
    scalars = [(key, item) for key, item in items if not isinstance(item, list | dict)]
    for number, (key, item) in enumerate(scalars[:_SIEVE]):
        child = f"{alias}_{number}"
        params.append(key)
        inner = _equals(child, item, params)
        tests.append(
            f"EXISTS (SELECT 1 FROM {members} AS {child} WHERE {child}.key = ? AND {inner})"
        )
    params.append(_canonical_text(value))
    # CASE fixes the order: SQLite would call the function first (it ranks it cheaper than
    # the subqueries), once per payload, where the tests above turn most of them away.
    return f"CASE WHEN {' AND '.join(tests)} THEN {JSON_EQUALS}({alias}.value, ?) ELSE 0 END"


def register(conn: sqlite3.Connection) -> None:
    """Make :func:`json_equals` callable in ``conn``'s SQL (as :data:`JSON_EQUALS`)."""
    conn.create_function(JSON_EQUALS, 2, json_equals, deterministic=True)


def json_equals(stored: str | None, wanted: str) -> int:
    """1 if the JSON text ``stored`` (a list or an object of a payload) equals the JSON text
    ``wanted`` (a match) by JSON's equality, else 0; text that does not parse equals nothing."""
    if stored is None:
        return 0
    try:
        return int(_same(json.loads(stored), _wanted(wanted)))
    except (ValueError, RecursionError):
        # A payload deeper than Python parses is deeper than any match (MAX_DEPTH): unequal.
        return 0


@lru_cache(maxsize=64)
def _wanted(text: str) -> Any:
    # One match is compared with many payloads: parsed once per statement, not once per row.
    return json.loads(text)


def _canonical_text(value: JSON) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _same(found: Any, wanted: Any) -> bool:
    """JSON's equality of two decoded values, stopping at the first difference (most payloads
    differ early): booleans apart from numbers (Python's ``True == 1``), numbers by value
    (``42 == 42.0``), objects whatever their key order, arrays in order."""
    if isinstance(wanted, bool) or wanted is None:
        return found is wanted
    if isinstance(wanted, int | float):
        return not isinstance(found, bool) and isinstance(found, int | float) and found == wanted
    if isinstance(wanted, str):
        return isinstance(found, str) and found == wanted
    if isinstance(wanted, list):
        return (
            isinstance(found, list)
            and len(found) == len(wanted)
            and all(_same(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return (
        isinstance(found, dict)
        and len(found) == len(wanted)
        and all(key in found and _same(found[key], item) for key, item in wanted.items())
    )
