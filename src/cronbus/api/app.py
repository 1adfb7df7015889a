"""The FastAPI application over the service layer: :func:`create_api`.

Every resource lives under ``/v1`` (:mod:`cronbus.api.routes`); ``/openapi.json``,
``/v1/health``, ``/v1/ready`` and ``/metrics`` (:mod:`.metrics_route`) need no token, everything
else a Bearer token. Errors are
problem documents (:mod:`.problems`), bodies over the limit are refused (:mod:`.bodylimit`),
POSTs honour ``Idempotency-Key`` (:mod:`.idempotency`), each token has a rate and each client
address a limit of failed token lookups (:mod:`.ratelimit`, :mod:`.clients`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from .. import console
from .._version import __version__
from ..app import App
from . import metrics_route, problems
from .bodylimit import BodyLimit
from .routes import ROUTERS
from .settings import ApiSettings
from .state import new_state

DESCRIPTION = """\
The HTTP API of cronbus: jobs, runs, dead letters, workers, topics and events, subscriptions,
connectors, tokens, namespaces, stats and the audit log.

Send `Authorization: Bearer TOKEN` (`cronbus tokens create`). Choose the namespace with the
`namespace` query parameter or the `X-Cronbus-Namespace` header (default: the token's only
namespace, else `default`). Listings are pages: `limit` (default 50, at most 250) and `cursor`,
with a `next` link. Every POST takes an `Idempotency-Key`. Errors are RFC 9457 problem details.
"""


def create_api(app: App, settings: ApiSettings | None = None) -> FastAPI:
    """The HTTP API serving ``app``'s store.

    The app is opened when the API starts (nested: a process that opened it already, like
    ``cronbus server``, shares its store) and closed when it stops.
    """
    chosen = settings or ApiSettings.load()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with app:
            yield

    api = FastAPI(
        title="cronbus",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url=None,  # every endpoint but health, ready and the document needs a token
        redoc_url=None,
    )
    api.state.cronbus = new_state(app, chosen)
    problems.install(api)
    _document_problems(api)
    api.add_middleware(BodyLimit, max_bytes=chosen.max_body)
    for router in ROUTERS:
        api.include_router(router, prefix="/v1")
    metrics_route.install(api, app)
    console.install(api)
    return api


def _document_problems(api: FastAPI) -> None:
    """Generate the OpenAPI document with the problem schemas among its components."""
    generate = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = problems.add_schemas(generate())
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
