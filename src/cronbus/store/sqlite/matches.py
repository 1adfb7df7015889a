"""Payload matches of a run listing (:attr:`cronbus.model.RunFilter.args`) in SQLite's SQL.

A payload is JSON text in ``run_payloads``; SQLite reads a JSON ``true`` as 1 and an object
back as text in its stored key order, so values are not compared as SQLite values: each match
walks the JSON with ``json_each`` and compares the element's JSON type and atom, objects key by
key and arrays index by index, which is JSON equality (``42`` is ``42.0``, never ``"42"``;
``true`` is not ``1``; ``{"a": 1, "b": 2}`` is ``{"b": 2, "a": 1}``). A stored NUL is read as
U+FFFD, as PostgreSQL's store reads it (see :func:`readable`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import count
from typing import Any

from ...model import JSON

_EMPTY = {"array": "[]", "object": "{}"}


def payload_condition(matches: Sequence[tuple[str, JSON]]) -> tuple[str, list[Any]]:
    """The condition on a run ``r`` that its payload meets every match, with its parameters
    (one probe of ``run_payloads`` by primary key, whichever index the listing walks)."""
    params: list[Any] = []
    names = (f"j{n}" for n in count())
    tests = []
    for key, value in matches:
        column, label = ("m.args", int(key)) if positional(key) else ("m.kwargs", key)
        column = readable(column)
        alias = next(names)
        params.append(label)
        inner = _equals(alias, value, params, names)
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


def _equals(alias: str, value: JSON, params: list[Any], names: Iterator[str]) -> str:
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
    items = list(enumerate(value)) if isinstance(value, list | tuple) else list(value.items())
    kind = "array" if isinstance(value, list | tuple) else "object"
    # ``value`` is JSON text only for arrays and objects (a string's is the bare text, which
    # json_each would refuse), so other elements are walked as an empty container instead.
    members = f"json_each(iif({alias}.type = '{kind}', {alias}.value, '{_EMPTY[kind]}'))"
    # Each member present and equal, and no other: the count excludes extra ones.
    params.append(len(items))
    tests = [f"{alias}.type = '{kind}'", f"(SELECT count(*) FROM {members}) = ?"]
    for key, item in items:
        child = next(names)
        params.append(key)
        inner = _equals(child, item, params, names)
        tests.append(
            f"EXISTS (SELECT 1 FROM {members} AS {child} WHERE {child}.key = ? AND {inner})"
        )
    return " AND ".join(tests)
