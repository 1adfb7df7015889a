"""Request schemas derived from the policy records, not declared a second time.

A job's body is :class:`~cronbus.job_specs.JobOptions` (the record ``@app.job``, the CLI and
the services take) plus its name and task: :func:`record_model` builds the pydantic model from
the dataclass's own fields and types, so an option added to the record appears in the API and
its OpenAPI document without an edit here. Unknown fields are refused (a typo is a 422 naming
it, not an option silently ignored).

Responses need nothing of the kind: FastAPI validates and documents the records (frozen
dataclasses) themselves.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, create_model

from ..admin_records import TokenRecord
from ..job_specs import JobOptions
from ..services.views import EventInput, SubscriptionInput

FORBID = ConfigDict(extra="forbid")


def record_model(
    name: str,
    record: type[Any],
    *,
    doc: str,
    required: dict[str, tuple[Any, Any]] | None = None,
    partial: bool = False,
    exclude: typing.Collection[str] = (),
    config: ConfigDict = FORBID,
) -> type[BaseModel]:
    """A pydantic model of ``record``'s fields (a dataclass), plus ``required`` ones first.

    ``partial``: every field is optional with no default (a PATCH body: send only what
    changes; read it with ``model_dump(exclude_unset=True)``).
    """
    hints = typing.get_type_hints(record)
    definitions: dict[str, Any] = dict(required or {})
    for item in dataclasses.fields(record):
        if item.name in exclude:
            continue
        kind = hints[item.name]
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
        __config__=FORBID,
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
