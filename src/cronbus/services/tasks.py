"""Tasks: what runs can be deferred for, from the app's code and the live workers' code.

A task registered by the app (the process serving the services) has its defaults and its
function's signature, so ``defer`` checks arguments before storing; one known only to live
workers of the namespace can still be run by them. A task the app registers that no live
worker knows is worth a warning: its runs would wait.
"""

from __future__ import annotations

import builtins

from ..liveness import is_live
from ..model import WorkerInfo
from .context import Context
from .views import TaskInfo


class TasksService:
    """Tasks seen from one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    async def list(self) -> builtins.list[TaskInfo]:
        """Every task, by name: the app's registered ones with their defaults, and those the
        namespace's live workers register (with how many workers know each)."""
        self._c.read()
        known = await self._known()
        names = sorted(set(self._c.app.tasks) | set(known))
        out = []
        for name in names:
            task = self._c.app.tasks.get(name)
            if task is None:
                out.append(TaskInfo(name=name, registered=False, workers=known.get(name, 0)))
                continue
            out.append(
                TaskInfo(
                    name=name,
                    registered=True,
                    workers=known.get(name, 0),
                    queue=task.queue,
                    priority=task.priority,
                    max_attempts=task.retry.max_attempts,
                    timeout=task.timeout,
                    isolation=task.isolation,
                )
            )
        return out

    async def unserved(self) -> builtins.list[str]:
        """Hints: the app's tasks that no live worker of the namespace knows (workers of
        older versions, which register no task list, are taken to know every task)."""
        self._c.read()
        workers = await self._live()
        if not workers or any(not w.tasks for w in workers):
            return [] if workers else ["no live worker in this namespace: runs wait for one"]
        known = {name for w in workers for name in w.tasks}
        return [
            f"no live worker knows task {name!r}: its runs wait until one does"
            for name in sorted(self._c.app.tasks)
            if name not in known
        ]

    async def _known(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for worker in await self._live():
            for name in dict.fromkeys(worker.tasks):
                counts[name] = counts.get(name, 0) + 1
        return counts

    async def _live(self) -> builtins.list[WorkerInfo]:
        now = self._c.now()
        found = await self._c.store.list_workers(now, namespace=self._c.namespace)
        return [w for w in found if is_live(w, now)]
