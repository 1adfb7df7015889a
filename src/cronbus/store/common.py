"""Names kept for importers of the shared store decisions; they live in :mod:`.logic`."""

from __future__ import annotations

from .logic import LEASE_EXPIRED, Finish, finish, job_run, overlap_decisions

__all__ = ["LEASE_EXPIRED", "Finish", "finish", "job_run", "overlap_decisions"]
