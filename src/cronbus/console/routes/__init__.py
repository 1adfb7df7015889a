"""The console's pages, one module per section; :data:`ROUTERS` in menu order."""

from __future__ import annotations

from fastapi import APIRouter

from . import (
    admin,
    auth,
    dead_letters,
    jobs,
    live,
    operations,
    overview,
    runs,
    subscriptions,
    topics,
    workers,
)

ROUTERS: tuple[APIRouter, ...] = (
    auth.router,
    overview.router,
    live.router,
    jobs.router,
    runs.router,
    operations.router,
    dead_letters.router,
    workers.router,
    topics.router,
    subscriptions.router,
    admin.router,
)
