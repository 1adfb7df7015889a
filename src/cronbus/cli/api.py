"""``cronbus api``: serve the HTTP API (FastAPI under uvicorn) over the app's store."""

from __future__ import annotations

import asyncio
import sys

import click

from .loading import CliError, app_options, resolve_app
from .observing import metrics_socket, observability_options

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@click.command()
@app_options()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to listen on (0.0.0.0 for every interface).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="The port to listen on (0: any free port; the URL printed names it).",
)
@click.option(
    "--log-level",
    type=click.Choice(_LEVELS, case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Log records below this level are not shown (DEBUG also logs every request).",
)
@observability_options
def api(
    app_spec: str | None,
    store_url: str | None,
    host: str,
    port: int,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
    log_format: str,
) -> None:
    """Serve the HTTP API: jobs, runs, dead letters, workers, topics, subscriptions, tokens.

    Every endpoint but /v1/health, /v1/ready and /openapi.json needs a token (`cronbus tokens
    create`). Prints the URL once listening; stop it with SIGTERM or Ctrl-C. CRONBUS_API_RATE
    (requests a minute per token, default 1200), CRONBUS_API_MAX_BODY (bytes, default 2 MiB)
    and CRONBUS_API_IDEMPOTENCY_TTL (seconds, default a day) tune it. Prometheus metrics
    are served at /metrics, without a token, on this port (and on --metrics-port if given).
    """
    # Imported here: the other commands need neither FastAPI nor uvicorn.
    from ..api.serving import ApiServer, listen, serve_api
    from ..api.settings import ApiSettings
    from .roles import setup_logging

    app = resolve_app(app_spec, store_url)
    settings = ApiSettings.load()
    metrics = metrics_socket(app, metrics_host, metrics_port)
    sock = listen(host, port)
    setup_logging(log_level, log_format, role="api")
    server = ApiServer(app, sock, settings, access_log=log_level.upper() == "DEBUG")
    try:
        asyncio.run(serve_api(server, app, on_open=announce, metrics=metrics))
    except KeyboardInterrupt:  # pragma: no cover - the handlers catch SIGINT
        raise CliError("interrupted") from None


def announce(url: str) -> None:
    """Say where the API answers, at once even when stdout is a pipe."""
    click.echo(f"cronbus API listening on {url} (OpenAPI document: {url}/openapi.json)")
    sys.stdout.flush()
