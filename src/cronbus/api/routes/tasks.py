"""``/v1/tasks``: the tasks runs can be deferred for (registered in the app's code, or known to
live workers of the namespace)."""

from __future__ import annotations

from typing import Any

from ...services.views import TaskInfo
from ..auth import Caller
from ..pagination import PageOut
from .common import router

tasks = router("tasks")


@tasks.get("/tasks", summary="List tasks", response_model=PageOut[TaskInfo])
async def list_tasks(services: Caller) -> dict[str, Any]:
    """Tasks of the namespace with their defaults where the app registers them (one page)."""
    return {"items": await services.tasks.list(), "next": None, "next_cursor": None}
