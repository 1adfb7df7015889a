"""The worker's log lines about ended attempts, one per attempt, each with a stable
``action`` field (``attempt.succeeded``, ``attempt.retry``, ``run.dead``, ...)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from logging import INFO

from ..model import ClaimedRun, Outcome
from ..states import AttemptOutcome

log = logging.getLogger("cronbus.worker")


def report_all(ended: Sequence[tuple[ClaimedRun, Outcome]], done: Sequence[bool]) -> None:
    """Log each ended attempt, recorded (``done``) or refused by its fence."""
    for (claimed, outcome), recorded in zip(ended, done, strict=True):
        report(claimed, outcome, recorded)


def report(claimed: ClaimedRun, outcome: Outcome, recorded: bool) -> None:
    """One log line per ended attempt, with a stable ``action`` field."""
    if recorded and outcome.outcome is AttemptOutcome.SUCCEEDED and not log.isEnabledFor(INFO):
        return  # the common line, when nobody reads it: no text made
    # "attempt N" is the attempt's number as `runs show` gives it (1, 2, ... in start order,
    # lost attempts included); "try k of m" counts the retry budget, which lost ones do not use.
    what = (
        f"run {claimed.run_id} {claimed.task} attempt {claimed.number} "
        f"(try {claimed.attempt} of {claimed.max_attempts})"
    )
    # The run's fields for JSON logs (cronbus.observability.logs): these lines are written by
    # the claim loop, outside the attempt's context.
    run = {
        "run": claimed.run_id,
        "attempt": claimed.number,
        "task": claimed.task,
        "queue": claimed.queue,
    }
    if not recorded:
        log.warning(
            "%s: lease no longer held; outcome %s dropped",
            what,
            outcome.outcome.value,
            extra={**run, "action": "attempt.fenced"},
        )
        return
    kind = outcome.outcome.value
    if outcome.outcome is AttemptOutcome.SUCCEEDED:
        log.info("%s succeeded", what, extra={**run, "action": "attempt.succeeded"})
        return
    error = outcome.error
    reason = f"{error.type}: {error.message}" if error else kind
    if outcome.outcome is AttemptOutcome.LOST:
        log.info(
            "%s stopped (%s); run queued again",
            what,
            reason,
            extra={**run, "action": "attempt.lost"},
        )
    elif outcome.outcome is AttemptOutcome.CANCELLED:
        log.info("%s cancelled", what, extra={**run, "action": "attempt.cancelled"})
    elif outcome.retry_at is not None:
        delay = max(0.0, outcome.retry_at - time.time())
        log.info(
            "%s %s (%s); retry in %.1fs",
            what,
            kind,
            reason,
            delay,
            extra={**run, "action": "attempt.retry"},
        )
    else:
        log.warning(
            "%s %s (%s); run is dead (dead letter)",
            what,
            kind,
            reason,
            extra={**run, "action": "run.dead"},
        )
