"""Request schemas derived from the policy records, not declared a second time.

A job's body is :class:`~cronbus.job_specs.JobOptions` (the record ``@app.job``, the CLI and
the services take) plus its name and task: :func:`record_model` builds the pydantic model from
the dataclass's own fields and types, so an option added to the record appears in the API and
its OpenAPI document without an edit here. Unknown fields are refused (a typo is a 422 naming
it, not an option silently ignored).

Every request body is strict (:data:`STRICT`; the bodies the routes declare derive from
:class:`StrictBody`, which has it): a number field takes a JSON number only, never ``true`` or
``"5"``, an integer no fraction, a string field no number and a boolean field no ``1`` or
``"true"``, as the Python API and the CLI refuse them. JSON has no time or duration type, so
those arrive as text: :data:`JsonDatetime` and :data:`JsonDuration` take ISO 8601 text (and
what a union with them allows besides, such as epoch seconds as a number), and
:func:`record_model` puts them in place of every ``datetime`` and ``timedelta`` of a record
(and lets an enum take its value).

Responses need nothing of the kind: FastAPI validates and documents the records (frozen
dataclasses) themselves.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Strict,
    TypeAdapter,
    ValidationError,
    create_model,
)

from ..admin_records import TokenRecord
from ..job_specs import JobOptions
from ..services.views import EventInput, SubscriptionInput

STRICT = ConfigDict(extra="forbid", strict=True)
"""The config of every request body: no unknown field, no value of another JSON type taken
for the one declared (pydantic's strict mode; FastAPI validates the parsed JSON as Python
values, where lax mode would take ``true`` for 1 and ``"5"`` for 5)."""


class StrictBody(BaseModel):
    """The base of the request bodies the routes declare: :data:`STRICT`, and frozen (a body
    is what the client sent, not something to change on the way)."""

    model_config = ConfigDict(**STRICT, frozen=True)


_DATETIME_TEXT: TypeAdapter[datetime] = TypeAdapter(datetime, config=STRICT)
_DURATION_TEXT: TypeAdapter[timedelta] = TypeAdapter(timedelta, config=STRICT)


def _number_text(text: str) -> bool:
    """True for text that reads as a number (``"5"``, ``"1.5e9"``)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _datetime_text(value: Any) -> Any:
    """ISO 8601 text as a datetime (as pydantic reads it from JSON), but never a number written
    as text: epoch seconds are a JSON number, so ``"5"`` is a mistake, not 1970-01-01T00:00:05.
    Anything else is left to the strict check that follows (a datetime passes, ``true`` not)."""
    if not isinstance(value, str):
        return value
    if _number_text(value):
        raise ValueError("a time is ISO 8601 text (2030-01-01T00:00:00Z), not a number as text")
    return _read_as_json(_DATETIME_TEXT, value)


def _duration_text(value: Any) -> Any:
    """ISO 8601 duration text (``PT5M``) as a timedelta; anything else is left to the strict
    check that follows."""
    if not isinstance(value, str):
        return value
    return _read_as_json(_DURATION_TEXT, value)


def _read_as_json(adapter: TypeAdapter[Any], text: str) -> Any:
    """``text`` read as the JSON string it arrived as (where pydantic parses ISO 8601), its
    refusal a plain ``ValueError`` that the body's validation reports at the field."""
    try:
        return adapter.validate_json(json.dumps(text))
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None


JsonDatetime = Annotated[datetime, BeforeValidator(_datetime_text)]
"""A time in a strict body: a datetime, or ISO 8601 text, never a boolean or a number as text."""
JsonDuration = Annotated[timedelta, BeforeValidator(_duration_text)]
"""A duration in a strict body: a timedelta, or ISO 8601 text (``PT5M``)."""


def json_type(kind: Any) -> Any:
    """``kind`` with every ``datetime``, ``timedelta`` and enum in it (inside unions, optionals
    and collections too) made to take what JSON can only carry as text; the rest as it is, for
    the strict config to check."""
    if kind is datetime:
        return JsonDatetime
    if kind is timedelta:
        return JsonDuration
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return Annotated[kind, Strict(False)]  # its value, as JSON sends it
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is None or not args or origin is Annotated:
        return kind
    converted = tuple(json_type(arg) for arg in args)
    if converted == args:
        return kind
    if origin in (typing.Union, types.UnionType):
        return typing.Union[converted]  # noqa: UP007 (a union built from a tuple of members)
    if origin in (Sequence, list, tuple, set, frozenset, Mapping, dict):
        return origin[converted]
    return kind


def record_model(
    name: str,
    record: type[Any],
    *,
    doc: str,
    required: dict[str, tuple[Any, Any]] | None = None,
    partial: bool = False,
    exclude: typing.Collection[str] = (),
    config: ConfigDict = STRICT,
) -> type[BaseModel]:
    """A pydantic model of ``record``'s fields (a dataclass), plus ``required`` ones first,
    each type as :func:`json_type` makes it.

    ``partial``: every field is optional with no default (a PATCH body: send only what
    changes; read it with ``model_dump(exclude_unset=True)``).
    """
    hints = typing.get_type_hints(record)
    definitions: dict[str, Any] = dict(required or {})
    for item in dataclasses.fields(record):
        if item.name in exclude:
            continue
        kind = json_type(hints[item.name])
        if partial:
            definitions[item.name] = (kind | None, None)
        elif item.default is not dataclasses.MISSING:
            definitions[item.name] = (kind, item.default)
        elif item.default_factory is not dataclasses.MISSING:
            definitions[item.name] = (kind, item.default_factory())
        else:
            definitions[item.name] = (kind, ...)
    model: type[BaseModel] = create_model(name, __config__=config, __doc__=doc, **definitions)
    return model


if TYPE_CHECKING:
    # Static stand-ins: mypy cannot follow models built at run time.
    class JobCreate(BaseModel):
        """A new job."""

        name: str
        task: str

    class JobChanges(BaseModel):
        """Changes to a job."""

    class SubscriptionCreate(BaseModel):
        """A new subscription."""

    class SubscriptionChanges(BaseModel):
        """Changes to a subscription."""

    class TokenOut(BaseModel):
        """A token as listed."""

    class EventBody(BaseModel):
        """An event to publish."""

        type: str

    class EventBatch(BaseModel):
        """Events to publish together."""

        events: list[EventBody]

else:
    JobCreate = record_model(
        "JobCreate",
        JobOptions,
        doc="A new job: its name, its task, one trigger (cron, every, after or at) and options.",
        required={"name": (str, ...), "task": (str, ...)},
    )
    JobChanges = record_model(
        "JobChanges",
        JobOptions,
        doc="Options to change (the others stay); a new trigger is given whole.",
        required={"task": (str | None, None)},
        partial=True,
    )
    SubscriptionCreate = record_model(
        "SubscriptionCreate",
        SubscriptionInput,
        doc="A new subscription: a name, a topic, one target (webhook URL or task), filters, "
        "where its cursor starts and delivery options.",
    )
    SubscriptionChanges = record_model(
        "SubscriptionChanges",
        SubscriptionInput,
        doc="Changes to a subscription: its filter, its target (given whole) or delivery "
        "options; what is not given stays, and so does its cursor.",
        partial=True,
        exclude={"name", "topic", "start", "replace_existing"},
    )
    TokenOut = record_model(
        "Token",
        TokenRecord,
        doc="An API token as stored, without its text or its hash (neither is ever shown "
        "again after creation).",
        exclude={"hash"},
        config=ConfigDict(from_attributes=True),
    )
    EventBody = record_model(
        "EventBody",
        EventInput,
        doc="An event to publish: its type and data; a new id, the time now and the source "
        "`cronbus` are given when not sent.",
    )
    EventBatch = create_model(
        "EventBatch",
        __config__=STRICT,
        __doc__="Events to publish together, all or none (at most 1,000).",
        events=(list[EventBody], ...),
    )


def job_options(body: BaseModel) -> JobOptions:
    """The :class:`JobOptions` a :class:`JobCreate` body gives (its defaults where unsaid)."""
    given = body.model_dump(exclude_unset=True, exclude={"name", "task"})
    return JobOptions(**given)


def event_input(body: BaseModel) -> EventInput:
    """The :class:`EventInput` an :class:`EventBody` gives."""
    return EventInput(**body.model_dump(exclude_unset=True))


def subscription_input(body: BaseModel) -> SubscriptionInput:
    """The :class:`SubscriptionInput` a :class:`SubscriptionCreate` body gives."""
    return SubscriptionInput(**body.model_dump(exclude_unset=True))


def changes(body: BaseModel) -> dict[str, Any]:
    """The fields a partial body gives, as the services take them."""
    return body.model_dump(exclude_unset=True)
