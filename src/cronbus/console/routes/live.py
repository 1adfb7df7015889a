"""Console section: the live stream (``GET /live?ns=NS``), one per browser and namespace.

A stream of server-sent events: ``event: tick`` at once and every 2 s, with the namespace
overview's ``version`` and its figures by ``data-figure`` name (``console.js`` fills them in
and, when the version changes, tells the page's live parts to fetch themselves again). The
browser's visible tab holding a Web Lock opens it and passes its ticks to the other tabs (a
browser without Web Locks opens one per tab). Every stream of a namespace listens to one
feed of the process's hub (:mod:`..hub`): twenty streams cost one computation per tick, and a
tab that closes its stream (hidden) costs nothing. A comment line keeps an idle connection
open through proxies. The stream checks its session again every minute and ends when it ended
(logout, expiry, its token revoked); it ends at once when the server stops (:func:`stop_streams`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import Request, Response
from fastapi.responses import StreamingResponse

from ...errors import CronbusError, UnauthorizedError
from ..hub import HUB, Tick
from ..session import SESSION_COOKIE, Console, Session, grant_of
from .common import console_router
from .overview import figures

router = console_router()

HEARTBEAT = 15.0
"""Seconds without a tick after which a comment line is sent (proxies close idle streams)."""
RECHECK = 60.0
"""Seconds between two checks that the stream's token still works."""
RETRY_MS = 3000
"""How long the browser waits before it reconnects a stream that ended (milliseconds)."""
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@router.get("/live")
async def live(request: Request, session: Console) -> Response:
    """The live stream of the session's namespace."""
    return StreamingResponse(
        _events(request, session), media_type="text/event-stream", headers=HEADERS
    )


async def _events(request: Request, session: Session) -> AsyncIterator[str]:
    services = session.services
    store = services.context.store

    async def compute() -> Tick:
        snapshot = await services.overview.snapshot()
        return Tick(snapshot.version, figures(snapshot))

    loop = asyncio.get_running_loop()
    key = (id(store), services.namespace)
    async with HUB.listen(key, compute, owner=request.app) as listener:
        yield f"retry: {RETRY_MS}\n\n"
        recheck_at = loop.time() + RECHECK
        while True:
            tick = await listener.next(timeout=min(HEARTBEAT, max(0.0, recheck_at - loop.time())))
            if listener.closed:
                return
            yield ": alive\n\n" if tick is None else tick.event()
            if loop.time() >= recheck_at:
                if not await _still_allowed(request, session):
                    return
                recheck_at = loop.time() + RECHECK


async def _still_allowed(request: Request, session: Session) -> bool:
    """True while the stream's session lives (not logged out, idle, expired, nor its token
    revoked) and its token still sees its namespace."""
    session_id = request.cookies.get(SESSION_COOKIE, "")
    try:
        access = (await grant_of(request, session_id)).access
    except UnauthorizedError:
        return False
    except CronbusError:  # the store is down: the token is asked about again next time
        return True
    return access.sees(session.namespace)


def stop_streams(api: object) -> int:
    """End the live streams ``api`` (the FastAPI app) serves: its server calls this when it
    stops, since uvicorn's graceful shutdown waits for open responses. Returns how many."""
    return HUB.close(api)
