"""``/v1/dead-letters`` as the dead letters service's methods: list, requeue, purge."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..services.pages import DEFAULT_LIMIT, Page
from ..services.views import DeadLetter, DeadLetterResult
from .http import Transport, decode
from .pages import page


class RemoteDeadLetters:
    """Dead letters of one namespace, on a server (the methods of
    :class:`~cronbus.services.dead_letters.DeadLettersService`)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def list(
        self,
        kind: str | None = None,
        task: str | None = None,
        queue: str | None = None,
        subscription: str | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """Dead runs and dead deliveries, newest first, with their last error."""
        params = {
            "kind": None if kind == "all" else kind,
            "task": task,
            "queue": queue,
            "subscription": subscription,
            "limit": limit,
            "cursor": cursor,
        }
        return page(DeadLetter, await self._http.get("/v1/dead-letters", params))

    async def requeue(
        self,
        run_ids: Sequence[int] = (),
        delivery_ids: Sequence[int] = (),
        *,
        all_runs: bool = False,
        all_deliveries: bool = False,
        subscription: str | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> DeadLetterResult:
        """Push dead letters again with a fresh attempt budget; one request, so ``progress``
        is told the count once, when the server answers."""
        body = _action(run_ids, delivery_ids, all_runs, all_deliveries, subscription)
        result = decode(DeadLetterResult, await self._http.post("/v1/dead-letters/requeue", body))
        if progress is not None:
            progress(result.count)
        return result

    async def purge(
        self,
        run_ids: Sequence[int] = (),
        delivery_ids: Sequence[int] = (),
        *,
        all_runs: bool = False,
        all_deliveries: bool = False,
        subscription: str | None = None,
    ) -> DeadLetterResult:
        """Delete dead letters for good."""
        body = _action(run_ids, delivery_ids, all_runs, all_deliveries, subscription)
        return decode(DeadLetterResult, await self._http.post("/v1/dead-letters/purge", body))


def _action(
    run_ids: Sequence[int],
    delivery_ids: Sequence[int],
    all_runs: bool,
    all_deliveries: bool,
    subscription: str | None,
) -> dict[str, object]:
    body: dict[str, object] = {
        "runs": list(run_ids),
        "deliveries": list(delivery_ids),
        "all_runs": all_runs,
        "all_deliveries": all_deliveries,
    }
    if subscription is not None:
        body["subscription"] = subscription
    return body
