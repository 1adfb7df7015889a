"""Console section: workers.

``/workers`` shows the namespace's workers (stopped ones are history and left out, as in
``cronbus workers list``): their state (``alive``, ``draining``, or ``lost`` once silent for
longer than their own lease), queues, labels, busy slots, the runs they hold and their
heartbeat's age, with the tasks whose queued runs no live worker knows above the table.
Writers ask a worker to drain.
"""

from __future__ import annotations

from fastapi import Request, Response

from ...fairness import EVERY_QUEUE
from ...model import WorkerState
from ..session import Console
from ..templates import page
from .common import console_router, done

router = console_router()

DRAINABLE = (WorkerState.ALIVE,)
"""States in which a worker is offered the Drain button (draining already is; lost is gone)."""


@router.get("/workers")
async def workers_page(request: Request, session: Console) -> Response:
    """The namespace's workers, newest first, with the tasks no live worker knows."""
    services = session.services
    seen = await services.workers.list()
    unknown = await services.workers.unknown_tasks()
    return page(
        request,
        session,
        "workers.html",
        partial="_workers_table.html",
        title="Workers",
        nav="workers",
        workers=seen,
        unknown=unknown,
        drainable=DRAINABLE,
        every_queue=EVERY_QUEUE,
    )


@router.post("/workers/{worker_id:path}/drain")
async def drain_worker(session: Console, worker_id: str) -> Response:
    """Ask a worker to finish what it holds, claim nothing more and stop."""
    view = await session.services.workers.drain(worker_id)
    return done(
        "/workers",
        f"Asked worker {view.worker.id} to drain: it claims nothing more and stops once its "
        f"{len(view.runs)} run(s) end",
    )
