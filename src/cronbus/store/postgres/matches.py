"""Payload matches of a run listing (:attr:`cronbus.model.RunFilter.args`) in PostgreSQL's SQL.

A payload is JSON text in ``run_payloads``; each match reads one element of it as ``json`` and
compares it as ``jsonb``, whose equality is JSON's (``42`` is ``42.0``, never ``"42"``; ``true``
is not ``1``; objects whatever their key order). JSON in PostgreSQL has no NUL character: a
stored NUL is read as U+FFFD, so it matches a value with U+FFFD there (matches cannot hold NUL).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...model import JSON


def _readable(column: str) -> str:
    """``column`` as text PostgreSQL's JSON functions accept: they refuse a document holding an
    escaped NUL anywhere, so such a payload (rare: found by ``strpos`` first) is read with U+FFFD
    in place of each NUL (the rule of :func:`cronbus.store.sqlite.matches.readable`)."""
    # Escaped backslashes are set aside first (as chr(1), which JSON text never holds raw), so
    # that each \u0000 left is an escape of its own, not text after an escaped backslash.
    setaside = rf"replace({column}, '\\', chr(1))"
    return (
        rf"CASE WHEN strpos({column}, '\u0000') = 0 THEN {column} "
        rf"ELSE replace(replace({setaside}, '\u0000', '\ufffd'), chr(1), '\\') END"
    )


def payload_condition(matches: Sequence[tuple[str, JSON]]) -> tuple[str, list[Any]]:
    """The condition on a run ``r`` that its payload meets every match, with its parameters
    (one probe of ``run_payloads`` by primary key, whichever index the listing walks)."""
    tests: list[str] = []
    params: list[Any] = []
    for key, value in matches:
        if key.isascii() and key.isdigit():
            tests.append(f"({_readable('m.args')}::json -> %s::int)::jsonb = %s::jsonb")
            params.append(int(key))
        else:
            tests.append(f"({_readable('m.kwargs')}::json -> %s::text)::jsonb = %s::jsonb")
            params.append(key)
        params.append(json.dumps(value))
    where = " AND ".join(tests)
    # OFFSET 0 keeps the EXISTS a probe per run of the listing's range: made a semi-join, the
    # planner would rather read every payload (it cannot guess how many a match keeps) and sort.
    condition = f"EXISTS (SELECT 1 FROM run_payloads m WHERE m.run_id = r.id AND {where} OFFSET 0)"
    return condition, params
