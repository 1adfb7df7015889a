"""The options every role command shares for observing it: ``--metrics-port``,
``--metrics-host`` and ``--log-format``, and the metrics socket they open."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import ConfigurationError
from .loading import CliError

if TYPE_CHECKING:
    from ..app import App

FC = TypeVar("FC", bound=Callable[..., Any])
LOG_FORMATS = ("text", "json")


def observability_options(fn: FC) -> FC:
    """``--metrics-port``, ``--metrics-host`` and ``--log-format`` (as ``metrics_port``,
    ``metrics_host`` and ``log_format``), which every role command takes."""
    decorators = [
        click.option(
            "--metrics-port",
            type=click.IntRange(0, 65535),
            envvar="CRONBUS_METRICS_PORT",
            show_envvar=True,
            help="Serve Prometheus metrics at /metrics on this port (0: any free port; the "
            "URL is printed). Default: no metrics port.",
        ),
        click.option(
            "--metrics-host",
            default="127.0.0.1",
            show_default=True,
            help="The address the metrics port listens on (0.0.0.0 for every interface).",
        ),
        click.option(
            "--log-format",
            type=click.Choice(LOG_FORMATS, case_sensitive=False),
            envvar="CRONBUS_LOG_FORMAT",
            show_envvar=True,
            default="text",
            show_default=True,
            help="text: lines for people; json: one JSON object per line (time, level, role, "
            "run, attempt, task, queue, subscription, message, action) for collectors.",
        ),
    ]
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


def metrics_socket(app: App, host: str, port: int | None) -> socket.socket | None:
    """The listening socket of ``--metrics-port`` (None without one), bound before any role
    starts so that a port in use is refused at once; its URL printed."""
    if port is None:
        return None
    try:
        if app.metrics is None:
            raise CliError(
                "--metrics-port: this app's metrics are switched off (App(metrics=False) or "
                "CRONBUS_METRICS=0)"
            )
    except ConfigurationError as exc:  # a bad CRONBUS_METRICS
        raise CliError(str(exc)) from None
    # Imported here: only a process with a metrics port needs the exposition.
    from ..observability.exposition import listen_metrics, url_of

    try:
        sock = listen_metrics(host, port)
    except ConfigurationError as exc:
        raise CliError(f"--metrics-port: {exc}") from None
    click.echo(f"cronbus metrics on {url_of(sock)}")
    sys.stdout.flush()
    return sock
