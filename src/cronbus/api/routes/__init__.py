"""The routers of the API, one module per resource, each mounted under ``/v1``."""

from __future__ import annotations

from fastapi import APIRouter

from .alerts import alerts
from .connectors import connectors
from .dead_letters import dead_letters
from .health import router as health
from .jobs import jobs
from .observing import audit, stats
from .operations import operations
from .runs import runs
from .subscriptions import subscriptions
from .tasks import tasks
from .tokens import namespaces, tokens
from .topics import topics
from .workers import workers

ROUTERS: tuple[APIRouter, ...] = (
    health,
    tasks,
    jobs,
    runs,
    dead_letters,
    workers,
    topics,
    subscriptions,
    connectors,
    operations,
    stats,
    audit,
    alerts,
    tokens,
    namespaces,
)
"""Every router, in the order the OpenAPI document lists them."""
