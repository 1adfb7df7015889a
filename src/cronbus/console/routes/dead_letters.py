"""Console section: dead letters.

``/dead-letters`` lists the dead runs and dead deliveries of the namespace, newest first,
narrowed by a filter form (kind, task, queue, subscription) kept in the URL. Writers requeue or
purge one at a time, or every one the filter matches: "requeue all matching" is a bulk
operation (followed on its own page), "purge all matching" deletes them at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import Request, Response
from starlette.datastructures import FormData

from ...errors import InvalidArgumentError, NotFoundError
from ...services import DeadLetter, DeadLetterKind, DeadLetterResult, Page
from ...services.dead_letters import check_ids
from ...services.pages import MAX_LIMIT
from ..session import Console, Session
from ..templates import page, query
from .common import console_router, done

router = console_router()

PAGE_SIZE = 50
"""Dead letters per page."""
FILTERS = ("kind", "task", "queue", "subscription")
"""The filter form's fields, as the dead-letter listing takes them."""
KINDS = (("", "Runs and deliveries"), ("run", "Runs"), ("delivery", "Deliveries"))
"""The kind choices of the filter form: (value, label)."""
_SHOWN = 10
"""Ids and refusals quoted in a notice (the count says how many there were)."""
_ID_DIGITS = 19
"""Ids are at most 2^63 - 1: longer text is no id (refused before ``int`` reads it)."""


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """The filter form's values (``None``: not given)."""

    kind: str | None = None
    task: str | None = None
    queue: str | None = None
    subscription: str | None = None

    @classmethod
    def of(cls, values: Mapping[str, object]) -> DeadFilter:
        """The filter a query string or a form gives (blank fields are not given)."""
        found: dict[str, str | None] = {}
        for name in FILTERS:
            value = values.get(name)
            found[name] = (value.strip() or None) if isinstance(value, str) else None
        return cls(**found)

    def given(self) -> dict[str, str]:
        """The fields given, by name."""
        return {name: value for name in FILTERS if (value := getattr(self, name)) is not None}

    def path(self) -> str:
        """``/dead-letters`` with this filter in its query."""
        fields = self.given()
        return "/dead-letters" + ("?" + urlencode(fields) if fields else "")


@router.get("/dead-letters")
async def dead_letters_page(request: Request, session: Console) -> Response:
    """Dead runs and deliveries, newest first; a bad filter is said above the form."""
    chosen = DeadFilter.of(request.query_params)
    cursor = request.query_params.get("cursor") or None
    found: Page[DeadLetter] = Page()
    error = ""
    status = 200
    try:
        found = await session.services.dead_letters.list(
            **chosen.given(), limit=PAGE_SIZE, cursor=cursor
        )
    except (InvalidArgumentError, NotFoundError) as exc:
        error, status = str(exc), (404 if isinstance(exc, NotFoundError) else 400)
    return page(
        request,
        session,
        "dead_letters.html",
        partial="_dead_letters_table.html",
        status=status,
        title="Dead letters",
        nav="dead_letters",
        letters=found.items,
        next_cursor=found.next,
        paged=cursor is not None,
        chosen=chosen,
        kinds=KINDS,
        error=error,
        here="/dead-letters" + query(request, notice=None),
    )


def _ids(form: FormData, field: str) -> list[int]:
    """The ids a form sends in ``field`` (the field repeated, or one comma-separated)."""
    texts = [part.strip() for value in form.getlist(field) for part in str(value).split(",")]
    numbers = []
    for text in filter(None, texts):
        if not text.isdigit() or len(text) > _ID_DIGITS:
            raise InvalidArgumentError(
                f"{field} ids must be whole numbers from 1, got {text[:40]!r}", field=field
            )
        numbers.append(int(text))
    return check_ids(numbers, field)


async def _chosen(request: Request) -> tuple[DeadFilter, list[int], list[int], bool]:
    """The form of a requeue or purge: its filter, the run and delivery ids, and ``all``."""
    form = await request.form()
    every = form.get("all") == "1"
    runs, deliveries = _ids(form, "run"), _ids(form, "delivery")
    if every and (runs or deliveries):
        raise InvalidArgumentError("give ids or all=1 with a filter, not both", field="all")
    if not every and not (runs or deliveries):
        raise InvalidArgumentError(
            "choose dead letters: run or delivery ids, or all=1 with a filter", field="run"
        )
    return DeadFilter.of(form), runs, deliveries, every


def _listed(ids: Sequence[int], what: str) -> str:
    """``3 run(s) (7, 8, 9)``: a count and the first ids."""
    shown = ", ".join(map(str, ids[:_SHOWN])) + (", …" if len(ids) > _SHOWN else "")
    return f"{len(ids)} {what} ({shown})"


def _said(verb: str, result: DeadLetterResult) -> str:
    """What a requeue or purge did, and what it refused."""
    parts = []
    if result.runs:
        parts.append(_listed(result.runs, "run(s)"))
    if result.deliveries:
        parts.append(_listed(result.deliveries, "delivery(ies)"))
    text = f"{verb} " + (" and ".join(parts) if parts else "nothing")
    if result.refused:
        text += "; refused: " + "; ".join(result.refused[:_SHOWN])
        if len(result.refused) > _SHOWN:
            text += f" (+{len(result.refused) - _SHOWN} more)"
    return text


def _refuse_if_nothing(result: DeadLetterResult) -> None:
    """Named ids none of which could be handled are bad input, said as such (400)."""
    if not result.count and result.refused:
        raise InvalidArgumentError("; ".join(result.refused[:_SHOWN]), field="run")


@router.post("/dead-letters/requeue")
async def requeue(request: Request, session: Console) -> Response:
    """Requeue the dead letters named, or start an operation requeueing all that match."""
    chosen, runs, deliveries, every = await _chosen(request)
    if every:
        op = await session.services.operations.start("dead_letters.requeue", filter=chosen.given())
        return done(
            f"/operations/{op.id}", f"Requeueing every matching dead letter: operation {op.id}"
        )
    result = await session.services.dead_letters.requeue(runs, deliveries)
    _refuse_if_nothing(result)
    return done(chosen.path(), _said("Requeued", result))


@router.post("/dead-letters/purge")
async def purge(request: Request, session: Console) -> Response:
    """Delete the dead letters named, or every one the filter matches."""
    chosen, runs, deliveries, every = await _chosen(request)
    if every:
        result = await purge_matching(session, chosen)
    else:
        result = await session.services.dead_letters.purge(runs, deliveries)
        _refuse_if_nothing(result)
    return done(chosen.path(), _said("Purged", result))


async def purge_matching(session: Session, chosen: DeadFilter) -> DeadLetterResult:
    """Purge every dead letter ``chosen`` matches: the listing's own filter (the service's
    purge takes no task or queue), a page at a time until none is left."""
    services = session.services
    result = DeadLetterResult()
    while True:
        found = await services.dead_letters.list(**chosen.given(), limit=MAX_LIMIT)
        runs = [letter.id for letter in found.items if letter.kind is DeadLetterKind.RUN]
        deliveries = [letter.id for letter in found.items if letter.kind is DeadLetterKind.DELIVERY]
        if not (runs or deliveries):
            return result
        purged = await services.dead_letters.purge(runs, deliveries)
        result.runs.extend(purged.runs)
        result.deliveries.extend(purged.deliveries)
        if not purged.count:
            # Listed as dead yet refused (changed meanwhile): stop rather than loop on them.
            result.refused.extend(purged.refused)
            return result
