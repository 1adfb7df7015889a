"""Bulk operations: retry, cancel, requeue or replay many things at once, in the background.

``start`` checks the request (a kind, and ids or a filter), stores the operation (pending) and
returns it at once; a task on the current event loop then takes a snapshot of the items (the
ids given, or those the filter matches now), and handles them in batches, saving progress
(``done``, ``failed``) after each batch. An operation aborted meanwhile is never moved again by
the store, which the runner sees on its next save and stops there. Each item is handled by the
same service method a single request uses, so the rules and the audit entries are the same.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..admin_records import Operation, OperationState
from ..errors import CronbusError, InvalidArgumentError, NotFoundError
from ..events.bus import OFFSET_LIMIT
from ..validation import check_int, check_time, shorten
from .context import Context, check_id, naming
from .dead_letters import DeadLettersService, check_ids
from .pages import DEFAULT_LIMIT, MAX_LIMIT, Page, check_limit, decode_cursor, page_of
from .runs import RunsService, check_matches
from .subscriptions import SubscriptionsService
from .views import RunQuery

log = logging.getLogger("cronbus.operations")
KINDS = ("runs.retry", "runs.cancel", "dead_letters.requeue", "subscriptions.replay")
"""The bulk actions an operation can do."""
BATCH = 100
"""Items handled between two saves of an operation's progress."""
MAX_ITEMS = 100_000
"""The most items one operation handles (a larger filter is refused: narrow it)."""
STALE_AFTER = 600.0
"""Seconds without progress after which a running operation is taken for abandoned."""
_ERRORS_KEPT = 5
"""Failures quoted in an operation's ``error`` (the count says how many there were)."""
_RUN_FILTER = ("states", "task", "queue", "job", "created_after", "created_before", "args", "id")
_DEAD_FILTER = ("kind", "task", "queue", "subscription")
_DEFAULT_STATES = {
    "runs.retry": ("dead", "cancelled"),
    "runs.cancel": ("scheduled", "queued", "running"),
}
_CURSOR = {"b": int}
_RUNNING: set[asyncio.Task[None]] = set()
"""Operations running in this process (kept referenced so they are not collected)."""


class OperationsService:
    """Bulk operations of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def start(
        self,
        kind: str,
        ids: Sequence[int] | Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
        *,
        delivery_ids: Sequence[int] = (),
        offset: int | None = None,
        since: float | None = None,
    ) -> Operation:
        """Start a bulk action on ``ids`` (run ids; subscription names for
        ``subscriptions.replay``; with ``delivery_ids`` for ``dead_letters.requeue``) or on
        what ``filter`` matches (the fields of a :class:`~.views.RunQuery`, payload ``args``
        as ``[argument, value]`` pairs; of a dead-letter listing; or
        ``topic`` for replays). A replay needs ``offset`` or ``since``. Returns the operation
        at once (pending); poll it with :meth:`get`, stop it with :meth:`abort`."""
        self._c.write()
        if kind not in KINDS:
            raise InvalidArgumentError(
                f"kind must be one of {', '.join(KINDS)}, got {shorten(kind)}", field="kind"
            )
        request = await self._request(kind, ids, filter, delivery_ids, offset, since)
        op = await self._c.store.put_operation(
            namespace=self._c.namespace,
            kind=kind,
            request=request,
            created_by=self._c.access.token_id or self._c.access.actor,
            now=self._c.now(),
        )
        await self._c.audit(f"operations.{kind}", op.id, {"request": request})
        task = asyncio.get_running_loop().create_task(self._run(op.id, kind, request))
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)
        return op

    async def get(self, operation_id: int) -> Operation:
        """One operation of the namespace, with its progress."""
        self._c.read()
        return await self._get(operation_id)

    async def _get(self, operation_id: int) -> Operation:
        operation_id = check_id(operation_id, "operation_id")
        missing = NotFoundError(f"no operation has id {operation_id}")
        try:
            op = await self._c.store.get_operation(operation_id)
        except NotFoundError:
            raise missing from None
        self._c.owns(op.namespace, missing)
        return await self._abandoned(op)

    async def _abandoned(self, op: Operation) -> Operation:
        """End an operation whose runner is gone (its process stopped): one that has not
        moved for :data:`STALE_AFTER` seconds is marked failed, saying so, so that nobody
        waits for it for ever. A live runner saves its progress after every batch."""
        now = self._c.now()
        if op.state.terminal or now - op.updated_at < STALE_AFTER:
            return op
        return await self._c.store.update_operation(
            op.id,
            now,
            state=OperationState.FAILED,
            error=(
                f"abandoned: no progress for {STALE_AFTER:.0f} s (the process running it "
                f"stopped) after {op.done + op.failed} of {op.total} items"
            ),
        )

    async def list(self, limit: int = DEFAULT_LIMIT, cursor: str | None = None) -> Page[Operation]:
        """Operations of the namespace, newest first, a page at a time."""
        self._c.read()
        limit = check_limit(limit)
        before = None if cursor is None else decode_cursor(cursor, _CURSOR)["b"]
        found = await self._c.store.list_operations(self._c.namespace, limit + 1, before)
        shown = [await self._abandoned(op) for op in found]
        return page_of(shown, limit, lambda op: {"b": op.id})

    async def abort(self, operation_id: int) -> Operation:
        """Stop an operation: items not handled yet are left alone (those handled stay
        handled). An operation that already ended is returned as it is."""
        self._c.write()
        op = await self._get(operation_id)
        if op.state.terminal:
            return op
        aborted = await self._c.store.update_operation(
            op.id, self._c.now(), state=OperationState.ABORTED
        )
        await self._c.audit("operations.abort", op.id, {"kind": op.kind})
        return aborted

    # -- the request -----------------------------------------------------------------------------
    async def _request(
        self,
        kind: str,
        ids: Sequence[int] | Sequence[str] | None,
        filter: Mapping[str, Any] | None,
        delivery_ids: Sequence[int],
        offset: int | None,
        since: float | None,
    ) -> dict[str, Any]:
        """The request as stored, every part checked now (so a bad one fails the call, not
        the operation later)."""
        if delivery_ids and kind != "dead_letters.requeue":
            raise InvalidArgumentError(
                "delivery_ids go with dead_letters.requeue", field="delivery_ids"
            )
        given_ids = (ids is not None and len(ids) > 0) or bool(delivery_ids)
        if given_ids == (filter is not None):
            raise InvalidArgumentError("give ids or a filter (exactly one)", field="ids")
        if kind == "subscriptions.replay":
            if (offset is None) == (since is None):
                raise InvalidArgumentError("give exactly one of offset or since", field="offset")
        elif offset is not None or since is not None:
            raise InvalidArgumentError(
                "offset and since go with subscriptions.replay", field="offset"
            )
        request: dict[str, Any] = {}
        if offset is not None:
            with naming("offset"):
                request["offset"] = check_int(offset, "offset", 1, OFFSET_LIMIT)
        if since is not None:
            with naming("since"):
                request["since"] = check_time(since, "since")
        if given_ids:
            if kind == "subscriptions.replay":
                request["names"] = _names(ids or ())
            else:
                request["ids"] = check_ids(ids or (), "ids")
                if delivery_ids:
                    request["delivery_ids"] = check_ids(delivery_ids, "delivery_ids")
            count = len(request.get("ids", request.get("names", []))) + len(
                request.get("delivery_ids", [])
            )
            if count > MAX_ITEMS:
                raise InvalidArgumentError(
                    f"ids must be at most {MAX_ITEMS}, got {count}", field="ids"
                )
            return request
        assert filter is not None
        if not isinstance(filter, Mapping):
            raise InvalidArgumentError(
                f"filter must be an object, got {shorten(filter)}", field="filter"
            )
        request["filter"] = await self._check_filter(kind, dict(filter))
        return request

    async def _check_filter(self, kind: str, given: dict[str, Any]) -> dict[str, Any]:
        allowed = {
            "runs.retry": _RUN_FILTER,
            "runs.cancel": _RUN_FILTER,
            "dead_letters.requeue": _DEAD_FILTER,
            "subscriptions.replay": ("topic",),
        }[kind]
        unknown = sorted(set(given) - set(allowed))
        if unknown:
            raise InvalidArgumentError(
                f"filter of {kind} takes {', '.join(allowed)}; not {unknown[0]!r}",
                field=f"filter.{unknown[0]}",
            )
        if kind.startswith("runs."):
            states = given.get("states")
            if isinstance(states, str):
                given["states"] = [states]
            given["states"] = [str(s) for s in (given.get("states") or _DEFAULT_STATES[kind])]
            if "args" in given:
                # Stored as JSON: each (argument, value) match as a two-item list.
                given["args"] = [list(m) for m in check_matches(given["args"], "filter.args")]
        try:
            await self._items(kind, {"filter": given}, probe=True)
        except InvalidArgumentError as exc:
            exc.field = f"filter.{exc.field}" if exc.field else "filter"
            raise
        return given

    # -- the runner ------------------------------------------------------------------------------
    async def _items(
        self, kind: str, request: Mapping[str, Any], *, probe: bool = False
    ) -> builtins.list[Any]:
        """The items an operation handles: the ids given, or a snapshot of what its filter
        matches now (``probe``: one page, only to check the filter)."""
        if "filter" not in request:
            if kind == "subscriptions.replay":
                return list(request["names"])
            items: list[Any] = list(request.get("ids", []))
            if kind == "dead_letters.requeue":
                items = [("run", i) for i in items]
                items += [("delivery", i) for i in request.get("delivery_ids", [])]
            return items
        given = request["filter"]
        found: list[Any] = []
        cursor: str | None = None
        limit = 1 if probe else MAX_LIMIT
        while True:
            if kind.startswith("runs."):
                query = RunQuery(**{k: v for k, v in given.items() if k in _RUN_FILTER})
                page: Page[Any] = await RunsService(self._c).list(query, limit, cursor)
                found += [run.id for run in page.items]
            elif kind == "dead_letters.requeue":
                dead = DeadLettersService(self._c)
                page = await dead.list(limit=limit, cursor=cursor, **given)
                found += [(letter.kind.value, letter.id) for letter in page.items]
            else:
                subs = SubscriptionsService(self._c)
                page = await subs.list(given.get("topic"), limit, cursor)
                found += [view.subscription.name for view in page.items]
            if probe or page.next is None:
                return found
            if len(found) > MAX_ITEMS:
                raise InvalidArgumentError(
                    f"the filter matches more than {MAX_ITEMS} items; narrow it", field="filter"
                )
            cursor = page.next

    async def _run(self, op_id: int, kind: str, request: Mapping[str, Any]) -> None:
        store = self._c.store
        done = failed = 0
        errors: list[str] = []
        try:
            items = await self._items(kind, request)
            op = await store.update_operation(
                op_id, self._c.now(), state=OperationState.RUNNING, total=len(items)
            )
            for start in range(0, len(items), BATCH):
                if op.state.terminal:
                    return  # aborted: the store keeps it as it is
                batch = items[start : start + BATCH]
                ok, bad = await self._handle(kind, batch, request, errors)
                done, failed = done + ok, failed + bad
                op = await store.update_operation(op_id, self._c.now(), done=done, failed=failed)
            if op.state.terminal:
                return
            summary = _summary(errors, failed)
            # Every item refused is no success (issue 30): the operation ends failed, its
            # summary saying why; a partly handled one ends succeeded, its failures counted.
            ended = OperationState.FAILED if failed and not done else OperationState.SUCCEEDED
            await store.update_operation(
                op_id,
                self._c.now(),
                state=ended,
                done=done,
                failed=failed,
                error=summary,
            )
        except Exception as exc:  # any failure ends the operation failed, saying why
            log.exception("operation %d (%s) failed", op_id, kind)
            try:
                await store.update_operation(
                    op_id,
                    self._c.now(),
                    state=OperationState.FAILED,
                    done=done,
                    failed=failed,
                    error=f"{type(exc).__name__}: {exc}",
                )
            except Exception:
                log.exception("operation %d: its failure could not be saved", op_id)

    async def _handle(
        self,
        kind: str,
        batch: Sequence[Any],
        request: Mapping[str, Any],
        errors: builtins.list[str],
    ) -> tuple[int, int]:
        """Handle one batch; (handled, refused), with the refusals' reasons in ``errors``."""
        if kind == "dead_letters.requeue":
            runs = [i for k, i in batch if k == "run"]
            deliveries = [i for k, i in batch if k == "delivery"]
            result = await DeadLettersService(self._c).requeue(runs, deliveries)
            errors.extend(result.refused)
            return result.count, len(runs) + len(deliveries) - result.count
        ok = bad = 0
        for item in batch:
            try:
                if kind == "runs.retry":
                    await RunsService(self._c).retry(item)
                elif kind == "runs.cancel":
                    await RunsService(self._c).cancel(item)
                else:
                    await SubscriptionsService(self._c).replay(
                        item, offset=request.get("offset"), since=request.get("since")
                    )
                ok += 1
            except CronbusError as exc:
                bad += 1
                errors.append(str(exc))
        return ok, bad


def _names(values: Sequence[Any]) -> builtins.list[str]:
    if isinstance(values, str | bytes):
        raise InvalidArgumentError(
            f"ids must be a list of names, got {shorten(values)}", field="ids"
        )
    names = []
    for value in values:
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(
                f"ids of subscriptions.replay are subscription names, got {shorten(value)}",
                field="ids",
            )
        names.append(value)
    return list(dict.fromkeys(names))


def _summary(errors: Sequence[str], failed: int) -> str | None:
    if not failed:
        return None
    shown = "; ".join(errors[:_ERRORS_KEPT])
    more = failed - min(failed, _ERRORS_KEPT)
    return f"{failed} item(s) not handled: {shown}" + (f" (+{more} more)" if more else "")


async def wait_all() -> None:
    """Wait for the operations running in this process (a server stopping, tests)."""
    while _RUNNING:
        await asyncio.gather(*list(_RUNNING), return_exceptions=True)
