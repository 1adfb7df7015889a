"""Console section: bulk operations.

``/operations`` lists the namespace's operations (retries, cancels, requeues, replays of many
items, started from the runs or dead-letters pages, the API or the CLI), newest first;
``/operations/{id}`` shows one with its progress bar, its counts and what went wrong, both
refreshing themselves while an operation runs. Writers abort a running operation there: the
items handled stay handled, the rest are left alone. The services audit the start and the abort;
the page says who started it.
"""

from __future__ import annotations

from fastapi import Request, Response

from ...admin_records import Operation
from ...errors import NotFoundError
from ..session import Console
from ..templates import page, query
from .common import console_router, done

router = console_router()

PAGE_SIZE = 50
"""Operations per page of ``/operations``."""


def _here(request: Request, path: str) -> str:
    """``path`` with the request's query, minus the last change's notice."""
    rest = query(request, notice=None)
    return path if rest == "?" else path + rest


def _operation_id(value: str) -> int:
    """An operation id from the path; anything else is an operation that does not exist."""
    if not value.isdigit() or len(value) > 19:
        raise NotFoundError(f"no operation has id {value!r}")
    return int(value)


def handled(op: Operation) -> int:
    """Items the operation got through, done or failed."""
    return op.done + op.failed


@router.get("/operations")
async def operations_page(
    request: Request, session: Console, cursor: str | None = None
) -> Response:
    """The namespace's operations, newest first, a page at a time."""
    found = await session.services.operations.list(limit=PAGE_SIZE, cursor=cursor or None)
    return page(
        request,
        session,
        "operations.html",
        partial="_operations_table.html",
        title="Operations",
        nav="operations",
        operations=found.items,
        next_cursor=found.next,
        paged=bool(cursor),
        here=_here(request, "/operations"),
    )


@router.get("/operations/{operation_id}")
async def operation_page(request: Request, session: Console, operation_id: str) -> Response:
    """One operation: what it does, its progress, who started it, what went wrong."""
    op = await session.services.operations.get(_operation_id(operation_id))
    return page(
        request,
        session,
        "operation.html",
        partial="_operation.html",
        title=f"Operation {op.id}",
        nav="operations",
        op=op,
        handled=handled(op),
        live=not op.state.terminal,
        may_abort=session.can_write and not op.state.terminal,
        here=_here(request, f"/operations/{op.id}"),
    )


@router.post("/operations/{operation_id}/abort")
async def abort(session: Console, operation_id: str) -> Response:
    """Stop an operation: what it handled stays handled, the rest is left alone."""
    op = await session.services.operations.abort(_operation_id(operation_id))
    return done(f"/operations/{op.id}", f"Operation {op.id} is {op.state.value}")
