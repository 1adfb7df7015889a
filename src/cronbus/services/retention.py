"""Purging finished runs on demand (``cronbus runs purge``, ``POST /v1/runs/purge``,
``services.runs.purge``): the rule is written once here, whichever door asks.

A purge removes the finished runs of the caller's namespace (with their attempts, payloads and
fan-out counters) that ended at least ``older_than`` ago, in the store's short retention
transactions, and at most ``limit`` per call, so an HTTP request stays short and a
command can show progress: call again while :attr:`PurgeResult.done` is False. Only finished
states can be named (succeeded, cancelled, dead, skipped); a run that is not finished, the
parent of a live child and a child whose parent is kept are never removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InvalidArgumentError
from ..observability.retention import PurgeReport, drain_free, purge_finished
from ..observability.retention_policy import check_purge_states, parse_age
from ..states import RunState
from ..validation import shorten
from .context import Context

__all__ = ["PURGE_LIMIT", "PurgeResult", "purge_runs"]

PURGE_LIMIT = 10_000
"""Runs one call removes at most, by default (a few seconds of work)."""
_MOST = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeResult:
    """What one purge call removed, and whether there may be more to remove."""

    removed: int
    """Runs removed by this call."""
    done: bool
    """True when no run the purge asked for is left (False: call again to go on)."""
    older_than: float
    """The age asked for, in seconds."""
    states: tuple[RunState, ...]
    """The states purged."""


def check_limit(limit: object, field: str = "limit") -> int:
    """How many runs one call may remove: a whole number from 1 to 1,000,000."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _MOST:
        raise InvalidArgumentError(
            f"{field} must be a whole number from 1 to {_MOST:,}, got {shorten(limit)}",
            field=field,
        )
    return limit


async def purge_runs(
    context: Context,
    older_than: object,
    states: Sequence[RunState | str] | None = None,
    limit: object = PURGE_LIMIT,
) -> PurgeResult:
    """Remove finished runs of the context's namespace that ended ``older_than`` ago or
    earlier (seconds, or like ``"1d"``; 0: every finished run of ``states``). Admins only."""
    context.admin()
    age = parse_age(older_than, "older_than")
    chosen = check_purge_states(states)
    most = check_limit(limit)
    report = PurgeReport()
    await purge_finished(
        context.store,
        report,
        namespace=context.namespace,
        before=context.now() - age,
        due=lambda run: True,
        batch=context.settings.retention_batch,
        states=chosen,
        most=most,
    )
    await drain_free(context.store, report)
    if report.runs:
        detail = {"removed": report.runs, "older_than": age, "states": [s.value for s in chosen]}
        await context.audit("runs.purge", context.namespace, detail)
    return PurgeResult(removed=report.runs, done=report.complete, older_than=age, states=chosen)
