"""Serving ``/metrics``: on a port of its own (``--metrics-port``), or on the API's port.

:class:`Exposition` renders an app's registry in Prometheus's text format, after taking the
shared store-wide figures (:class:`~.gauges.Aggregate`); one per app, however many doors serve
it. :func:`listen_metrics` binds the port before any role starts, so a port in use or out of
range is one clear error at the command line's edge. :class:`MetricsServer` answers on that
socket from the roles' own event loop (aiohttp), beside them.

The endpoint needs no token, like a health check: it shows counts and names (tasks, queues,
jobs, subscriptions, topics), never arguments, payloads or ids. Bind it to a private address
(the default is 127.0.0.1), or put it behind the proxy that guards the API.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..errors import ConfigurationError
from ..validation import shorten
from .gauges import Aggregate

if TYPE_CHECKING:
    from ..app import App
    from .metrics import Metrics

__all__ = [
    "PORT_VARIABLE",
    "Exposition",
    "MetricsServer",
    "exposition_of",
    "listen_metrics",
    "metrics_port",
    "served",
]

log = logging.getLogger("cronbus.metrics")
PORT_VARIABLE = "CRONBUS_METRICS_PORT"
"""The metrics port of the roles when ``--metrics-port`` is not given."""
PATH = "/metrics"


def metrics_port(given: int | None, env: Mapping[str, str] | None = None) -> int | None:
    """The metrics port: ``given``, else ``CRONBUS_METRICS_PORT``, else None (no port)."""
    if given is not None:
        return given
    raw = (os.environ if env is None else env).get(PORT_VARIABLE, "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigurationError(
            f"{PORT_VARIABLE}: expected a port from 0 to 65535 (0: any free port), got "
            f"{shorten(raw)}"
        )
    return port


def listen_metrics(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` for the metrics endpoint, or a ConfigurationError
    that says which and why (a port in use, an address this machine does not have)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, OverflowError) as exc:
        raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
        ) from None
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    """The URL of the metrics endpoint on ``sock``."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{PATH}"


class Exposition:
    """Renders one app's metrics (see the module's docstring)."""

    def __init__(self, app: App, metrics: Metrics) -> None:
        self.metrics = metrics
        self.aggregate = Aggregate(app)
        """The store-wide gauges, rendered after the registry's families."""

    async def render(self) -> bytes:
        """The text exposition, with store-wide figures a few seconds old at most.

        A store that fails to give them (a server restarting) does not fail the scrape: the
        last figures are shown, and ``cronbus_metrics_figures_age_seconds`` says how old.
        """
        try:
            await self.aggregate.refresh()
        except Exception:
            log.warning(
                "computing the store-wide figures failed; showing the last ones", exc_info=True
            )
        return generate_latest(self.metrics.registry) + self.aggregate.text()


def exposition_of(app: App) -> Exposition | None:
    """The app's one :class:`Exposition` (made on first use); None when its metrics are
    switched off."""
    metrics = app.metrics
    if metrics is None:
        return None
    if metrics.exposition is None:
        metrics.exposition = Exposition(app, metrics)
    return metrics.exposition


class MetricsServer:
    """``GET /metrics`` on a socket of its own, served from the running event loop."""

    def __init__(self, app: App, sock: socket.socket) -> None:
        self.app = app
        self.sock = sock
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """Where the endpoint answers (``http://127.0.0.1:9464/metrics``)."""
        return url_of(self.sock)

    async def start(self) -> None:
        """Start answering (the app must be open)."""
        exposition = exposition_of(self.app)
        if exposition is None:
            raise ConfigurationError(
                "the metrics port is set but this app's metrics are switched off "
                "(App(metrics=False) or CRONBUS_METRICS=0)"
            )

        async def scrape(_: web.Request) -> web.Response:
            body = await exposition.render()
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        web_app = web.Application()
        web_app.router.add_get(PATH, scrape)
        self._runner = web.AppRunner(web_app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()
        log.info("metrics on %s", self.url, extra={"action": "metrics.start"})

    async def stop(self) -> None:
        """Stop answering and close the socket."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.sock.close()


@contextlib.asynccontextmanager
async def served(app: App, sock: socket.socket) -> AsyncIterator[MetricsServer]:
    """Serve ``/metrics`` of ``app`` on ``sock`` while the block runs (the app must be open)."""
    server = MetricsServer(app, sock)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
