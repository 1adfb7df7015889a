"""Names kept for importers of the store contract; the protocols live in :mod:`.ports`."""

from __future__ import annotations

from .ports import CONTROL_CHANNEL, JOBS_CHANNEL, RUNS_CHANNEL, HeldAttempt, Listener, Store

__all__ = ["CONTROL_CHANNEL", "JOBS_CHANNEL", "RUNS_CHANNEL", "HeldAttempt", "Listener", "Store"]
