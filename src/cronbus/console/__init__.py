"""The web console: server-rendered pages over the service layer, served at ``/``.

``cronbus api`` and ``cronbus server`` mount it beside the HTTP API (:func:`install`). An
operator logs in with an API token, which opens a server-side session whose random id is all
the cookie keeps (:mod:`.session`); every page reads and changes the store through
:class:`~cronbus.services.Services` with that token's access, so the console can do exactly
what the token may do and offers nothing more. Pages are
Jinja2 templates with htmx for partial updates; a server-sent-events stream
(:mod:`.routes.live`) tells the tabs when the shared, cached aggregate changed: one per browser
and namespace (the visible tab holding a Web Lock streams and passes ticks to the others; a
browser without Web Locks opens one per tab), and none from a hidden tab. Every asset is served
from this package: nothing is loaded from the network.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from .routes import ROUTERS
from .templates import STATIC_DIR

__all__ = ["install"]


def install(api: FastAPI) -> None:
    """Serve the console on ``api``: its pages at ``/`` and its assets under ``/static``."""
    api.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for router in ROUTERS:
        api.include_router(router, include_in_schema=False)
