"""``GET /metrics`` on the API's port: the app's Prometheus metrics (see
:mod:`cronbus.observability.exposition`).

Like ``/v1/health``, it needs no token: a Prometheus server scrapes it without credentials, and
it shows counts and the names of tasks, queues, jobs, subscriptions and topics, never
arguments, payloads or ids. It is left out of the OpenAPI document (it is not JSON). An app whose
metrics are switched off answers 404.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from ..app import App
from ..observability.exposition import PATH, exposition_of

__all__ = ["install"]


def install(api: FastAPI, app: App) -> None:
    """Serve ``app``'s metrics at ``/metrics`` on ``api``."""
    # Made now, not at the first scrape: the store counts publishes and transactions from the
    # moment it opens.
    _ = app.metrics

    async def metrics(_: Request) -> Response:
        exposition = exposition_of(app)
        if exposition is None:
            return Response("metrics are switched off (CRONBUS_METRICS=0)\n", status_code=404)
        body = await exposition.render()
        return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    api.add_api_route(PATH, metrics, methods=["GET"], include_in_schema=False)
