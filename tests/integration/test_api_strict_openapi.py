"""Strict types everywhere the OpenAPI document says a number, a boolean or a string, checked
from the document itself so that a new schema or field is covered without an edit here.

Every field of every JSON request body (nested objects and the items of arrays too) gets the
values of another JSON type its schema does not allow, alone in a body: a boolean, a number as
text, a fraction for an integer, a number for a string, ``1`` or ``"true"`` for a boolean. Each
must be a 422 that names the field (the body lacking its other required fields is a 422 too,
but one that names only those). Time and duration fields (``format: date-time`` / ``duration``)
must take ISO 8601 text. Every number or boolean query and path parameter must refuse a word
(``true``, ``five``) and take a number written as text, as a query string carries it.

The API is served by a real server on loopback (SQLite: validation comes before any store).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from integration.test_api_support import Api, api

__all__ = ["api"]

TIME_TEXT = {"date-time": "2099-01-01T00:00:00Z", "duration": "PT5M"}
"""ISO 8601 text each text format of a time must take."""
Schema = dict[str, Any]
Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Probe:
    """A value for one field of a body, and whether the API must refuse it."""

    operation: str
    where: Path
    value: Any
    refused: bool
    union: str | None = None
    """The enclosing field a refusal may name instead, when the value sits in one member of
    a union (``broadcast``: ``true`` or a list of labels; ``broadcast[0]`` is a label)."""

    @property
    def field(self) -> str:
        """The field as a problem names it: ``events[0].time``."""
        name = ""
        for part in self.where:
            name += f"[{part}]" if isinstance(part, int) else ("." if name else "") + part
        return name

    def body(self) -> Any:
        """A body holding only this value, at its place."""
        body: Any = {}
        here = body
        for part, after in zip(self.where, self.where[1:], strict=False):
            child: Any = [] if isinstance(after, int) else {}
            if isinstance(part, int):
                here.append(child)
            else:
                here[part] = child
            here = child
        last = self.where[-1]
        if isinstance(last, int):
            here.append(copy.deepcopy(self.value))
        else:
            here[last] = copy.deepcopy(self.value)
        return body


class Document:
    """The served OpenAPI document, with its references resolved on the way."""

    def __init__(self, doc: Schema) -> None:
        self.doc = doc

    def resolve(self, schema: Schema) -> Schema:
        while "$ref" in schema:
            schema = self.doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def members(self, schema: Schema) -> list[Schema]:
        """The alternatives a schema allows (``anyOf`` / ``oneOf`` flattened), null left out."""
        schema = self.resolve(schema)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return [m for part in schema[key] for m in self.members(part)]
        return [] if schema.get("type") == "null" else [schema]

    def operations(self) -> Iterator[tuple[str, str, Schema]]:
        """(method, path, operation) of every operation."""
        for path, methods in self.doc["paths"].items():
            for method, operation in methods.items():
                yield method.upper(), path, operation


def mistyped(members: list[Schema]) -> list[Any]:
    """Values of a JSON type the alternatives ``members`` do not allow (none when one of them
    takes anything)."""
    if not members or any("type" not in m for m in members):
        return []
    types = {m["type"] for m in members}
    strings = [m for m in members if m["type"] == "string"]
    plain_text = any(m.get("format") not in TIME_TEXT for m in strings)
    bad: list[Any] = []
    if "boolean" not in types:
        bad.append(True)
    if types & {"integer", "number"} and not plain_text:
        bad.append("5")  # a number as text: JSON has numbers
    if "integer" in types and "number" not in types:
        bad.append(1.5)
    if types == {"string"}:
        bad.append(5)
    if types == {"boolean"}:
        bad += [1, "true"]
    return bad


def probes(doc: Document, label: str, schema: Schema, where: Path = ()) -> Iterator[Probe]:
    """The probes of a body schema's fields, nested ones included."""
    for member in doc.members(schema):
        for name, field in member.get("properties", {}).items():
            yield from _field(doc, label, field, (*where, name))


def _field(
    doc: Document, label: str, schema: Schema, where: Path, union: str | None = None
) -> Iterator[Probe]:
    members = doc.members(schema)
    for value in mistyped(members):
        yield Probe(label, where, value, refused=True, union=union)
    if len(members) > 1:
        union = Probe(label, where, None, refused=True).field
    for member in members:
        if member.get("format") in TIME_TEXT:
            yield Probe(label, where, TIME_TEXT[member["format"]], refused=False)
        if member.get("type") == "array" and "items" in member:
            yield from _field(doc, label, member["items"], (*where, 0), union)
        if member.get("properties"):
            for name, field in member["properties"].items():
                yield from _field(doc, label, field, (*where, name), union)


def concrete(path: str, parameters: list[Schema], doc: Document) -> str:
    """``path`` with each path parameter given a valid value of its type."""
    for parameter in parameters:
        if parameter["in"] == "path":
            types = {m.get("type") for m in doc.members(parameter["schema"])}
            value = "1" if types & {"integer", "number"} else "x"
            path = path.replace("{" + parameter["name"] + "}", value)
    return path


def text_number(schema: Schema) -> str:
    """A number within the parameter's bounds, written as a query string carries it."""
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
    high = schema.get("maximum", low)
    return str(min(max(1, low), high))


def named(response: httpx.Response) -> list[str]:
    """The fields a 422 names (none for another answer)."""
    if response.status_code != 422:
        return []
    return [e["field"] for e in response.json().get("errors", [])]


async def test_every_body_field_refuses_other_json_types(api: Api) -> None:
    doc = Document((await api.client.get("/openapi.json")).json())
    found: list[Probe] = []
    wrong: list[str] = []
    for method, path, operation in doc.operations():
        content = operation.get("requestBody", {}).get("content", {})
        if "application/json" not in content:
            continue
        label = f"{method} {path}"
        url = concrete(path, operation.get("parameters", []), doc)
        for probe in probes(doc, label, content["application/json"]["schema"]):
            found.append(probe)
            response = await api.call(method, url, json=probe.body())
            fields = named(response)
            if probe.refused and not {probe.field, probe.union} & set(fields):
                wrong.append(f"{label} {probe.body()}: {response.status_code} {fields}")
            if not probe.refused and probe.field in fields:
                wrong.append(f"{label} {probe.body()} refused: {response.text[:300]}")
    assert not wrong, "\n".join(wrong)
    # The walk reached what issue 30 reported, nested fields and the times.
    seen = {(p.operation, p.field) for p in found}
    for expected in (
        ("POST /v1/runs", "priority"),
        ("POST /v1/runs", "shards"),
        ("POST /v1/jobs", "shards"),
        ("PATCH /v1/jobs/{name}", "priority"),
        ("POST /v1/subscriptions/{name}/replay", "offset"),
        ("POST /v1/operations", "delivery_ids[0]"),
        ("POST /v1/topics/{topic}/events/batch", "events[0].time"),
        ("POST /v1/jobs", "start"),
    ):
        assert expected in seen, (expected, sorted(seen))
    assert len(found) > 200, len(found)


async def test_every_number_parameter_takes_text_numbers_but_not_words(api: Api) -> None:
    doc = Document((await api.client.get("/openapi.json")).json())
    checked = 0
    wrong: list[str] = []
    for method, path, operation in doc.operations():
        parameters = operation.get("parameters", [])
        for parameter in parameters:
            if parameter["in"] not in ("query", "path"):
                continue
            types = {m.get("type") for m in doc.members(parameter["schema"])}
            if not types & {"integer", "number", "boolean"}:
                continue
            name = parameter["name"]
            if types == {"boolean"}:
                bad, good = ["five", "2"], "true"
            else:
                bad, good = ["true", "five"], text_number(doc.members(parameter["schema"])[0])
            for value in bad:
                response = await _send(api, doc, method, path, parameters, parameter, value)
                if name not in named(response):
                    wrong.append(f"{method} {path} {name}={value}: {response.status_code}")
            response = await _send(api, doc, method, path, parameters, parameter, good)
            if name in named(response):
                wrong.append(f"{method} {path} {name}={good} refused: {response.text[:300]}")
            checked += 1
    assert not wrong, "\n".join(wrong)
    assert checked > 15, checked


async def _send(
    api: Api,
    doc: Document,
    method: str,
    path: str,
    parameters: list[Schema],
    parameter: Schema,
    value: str,
) -> httpx.Response:
    """``operation`` with ``parameter`` set to ``value`` (the other path parameters valid)."""
    if parameter["in"] == "path":
        others = [p for p in parameters if p is not parameter]
        url = concrete(path.replace("{" + parameter["name"] + "}", value), others, doc)
        return await api.call(method, url)
    url = concrete(path, parameters, doc)
    return await api.call(method, url, params={parameter["name"]: value})
