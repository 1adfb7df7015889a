"""Role commands: ``server`` (every role in one process), ``worker``, ``scheduler`` and
``dispatcher``.

Each runs until SIGTERM or SIGINT, which stop the scheduler and drain the worker (a second
signal hurries it), and exits with status 0 after a clean stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.logging import RichHandler

from ..app import NAMESPACE_VARIABLE, App
from ..errors import ConfigurationError, InvalidArgumentError
from ..fairness import EVERY_QUEUE, parse_queues
from ..store import StoreFaultError
from ..validation import check_label, check_namespace
from ..worker.serving import check_labels
from .loading import CliError, app_options, resolve_app
from .observing import metrics_socket, observability_options

if TYPE_CHECKING:
    from .. import runner

FC = TypeVar("FC", bound=Callable[..., Any])
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_RICH_FORMAT = "%(name)s: %(message)s"
log = logging.getLogger("cronbus.runner")


def _check_namespace(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_namespace(value)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc)) from None


def _namespace_option(fn: FC) -> FC:
    """``--namespace`` (as ``namespace``): the namespace the role serves."""
    return click.option(
        "--namespace",
        metavar="NAME",
        envvar=NAMESPACE_VARIABLE,
        callback=_check_namespace,
        help="The namespace to serve: a worker claims only its runs, and the app's code jobs "
        "and subscriptions are synced into it. Default: CRONBUS_NAMESPACE, else the app's.",
    )(fn)


def _load(app_spec: str, store_url: str | None, namespace: str | None) -> App:
    """The app the role serves, moved to ``namespace`` when one is given."""
    app = resolve_app(app_spec, store_url)
    if namespace is not None:
        # Its code jobs and subscriptions move with it, so the scheduler and the dispatcher
        # sync them into the namespace served.
        app.use_namespace(namespace)
    return app


def _role_options(fn: FC) -> FC:
    """The options ``server`` and ``worker`` share."""
    decorators = [
        app_options(app_required=True),
        _namespace_option,
        click.option(
            "--queues",
            metavar="NAME[:WEIGHT],...",
            help="Queues to serve, with optional weights (e.g. default,emails:3). "
            "Default: every queue, those first used later included, shared fairly ('*').",
        ),
        click.option(
            "--concurrency",
            type=click.IntRange(min=1),
            help="Attempts run at once. Default: CRONBUS_CONCURRENCY, else 8.",
        ),
        click.option(
            "--labels",
            metavar="LABEL,...",
            default="",
            help="Labels of this worker (e.g. gpu,eu-west), registered with it: runs that "
            "need labels (a task's labels=, a broadcast's) go only to workers carrying them all.",
        ),
        click.option(
            "--name",
            metavar="ID",
            help="The worker's id in the registry (a fail-over route names workers by it). "
            "Default: HOST-PID-RANDOM, new at each start.",
        ),
        click.option(
            "--no-connectors",
            is_flag=True,
            help="Run no connector tasks in this process (by default its worker takes a share).",
        ),
        click.option(
            "--log-level",
            type=click.Choice(_LEVELS, case_sensitive=False),
            default="INFO",
            show_default=True,
            help="Log records below this level are not shown.",
        ),
        observability_options,
    ]
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


@click.command()
@_role_options
@click.option(
    "--api-host",
    default="127.0.0.1",
    show_default=True,
    help="The address the HTTP API listens on (0.0.0.0 for every interface).",
)
@click.option(
    "--api-port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="The port the HTTP API listens on (0: any free port; the URL printed names it).",
)
@click.option("--no-api", is_flag=True, help="Do not serve the HTTP API.")
def server(
    app_spec: str,
    store_url: str | None,
    namespace: str | None,
    queues: str | None,
    concurrency: int | None,
    labels: str,
    name: str | None,
    no_connectors: bool,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
    log_format: str,
    api_host: str,
    api_port: int,
    no_api: bool,
) -> None:
    """Run every role in one process: the app's startup hooks, a scheduler, a worker, a
    dispatcher and the HTTP API (as `cronbus api`; --no-api leaves it out).

    This is the one command a single machine needs. Stop it with SIGTERM or Ctrl-C: running
    attempts get a grace period to finish, and a second signal requeues them at once.
    """
    _run_role(
        _load(app_spec, store_url, namespace),
        queues,
        concurrency,
        labels,
        log_level,
        role="server",
        observing=(metrics_host, metrics_port, log_format),
        name=name,
        startup=True,
        scheduler=True,
        dispatcher=True,
        api=None if no_api else (api_host, api_port),
        connectors=not no_connectors,
    )


@click.command()
@_role_options
def worker(
    app_spec: str,
    store_url: str | None,
    namespace: str | None,
    queues: str | None,
    concurrency: int | None,
    labels: str,
    name: str | None,
    no_connectors: bool,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
    log_format: str,
) -> None:
    """Run a worker only: claim runs from the queues and execute them.

    It also runs a share of the connector tasks, unless started with --no-connectors.

    Start as many as needed, on any machine that reaches the store; the app's startup hooks
    are left to `cronbus server`. Stop it with SIGTERM or Ctrl-C as for the server.
    """
    app = _load(app_spec, store_url, namespace)
    _run_role(
        app,
        queues,
        concurrency,
        labels,
        log_level,
        role="worker",
        observing=(metrics_host, metrics_port, log_format),
        name=name,
        startup=False,
        connectors=not no_connectors,
    )


@click.command()
@app_options(app_required=True)
@_namespace_option
@click.option(
    "--log-level",
    type=click.Choice(_LEVELS, case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Log records below this level are not shown.",
)
@observability_options
def scheduler(
    app_spec: str,
    store_url: str | None,
    namespace: str | None,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
    log_format: str,
) -> None:
    """Run a scheduler only: fire due jobs into runs, exactly once per fire.

    Start one or several: they share the work through the store, and a fire creates one run
    however many run. The app's code-defined jobs are synced to the store at start.
    """
    app = _load(app_spec, store_url, namespace)
    sock = metrics_socket(app, metrics_host, metrics_port)
    setup_logging(log_level, log_format, role="scheduler")
    _serve(app, startup=False, worker=False, scheduler=True, metrics=sock)


@click.command()
@app_options(app_required=True)
@_namespace_option
@click.option(
    "--log-level",
    type=click.Choice(_LEVELS, case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Log records below this level are not shown.",
)
@observability_options
def dispatcher(
    app_spec: str,
    store_url: str | None,
    namespace: str | None,
    log_level: str,
    metrics_port: int | None,
    metrics_host: str,
    log_format: str,
) -> None:
    """Run a dispatcher only: push the events of subscriptions to their targets.

    Start one or several: each subscription's pusher is held by one dispatcher at a time
    through a lease, and moves to another when its holder dies. The app's `@app.subscribe`
    handlers are synced to the store at start.
    """
    app = _load(app_spec, store_url, namespace)
    sock = metrics_socket(app, metrics_host, metrics_port)
    setup_logging(log_level, log_format, role="dispatcher")
    _serve(app, startup=False, worker=False, dispatcher=True, metrics=sock)


def _run_role(
    app: App,
    queues: str | None,
    concurrency: int | None,
    labels: str,
    log_level: str,
    *,
    role: str,
    observing: tuple[str, int | None, str],
    name: str | None = None,
    startup: bool,
    scheduler: bool = False,
    dispatcher: bool = False,
    api: tuple[str, int] | None = None,
    connectors: bool = True,
) -> None:
    spec = queues if queues is not None else EVERY_QUEUE
    try:
        parse_queues(spec)  # refuse a bad --queues before the store is opened
    except ConfigurationError as exc:
        raise CliError(f"--queues: {exc}") from None
    try:
        chosen = check_labels(labels)
    except ConfigurationError as exc:
        raise CliError(f"--labels: {exc}") from None
    if name is not None:
        try:
            name = check_label(name, "--name")
        except InvalidArgumentError as exc:
            raise CliError(str(exc)) from None
    metrics_host, metrics_port, log_format = observing
    sock = metrics_socket(app, metrics_host, metrics_port)
    api_server = _api_server(app, *api, log_level) if api is not None else None
    setup_logging(log_level, log_format, role=role)
    _serve(
        app,
        queues=spec,
        concurrency=concurrency,
        startup=startup,
        scheduler=scheduler,
        dispatcher=dispatcher,
        labels=chosen,
        api=api_server,
        name=name,
        connectors=connectors,
        metrics=sock,
    )


def _api_server(app: App, host: str, port: int, log_level: str) -> runner.ApiRole:
    """The HTTP API of ``app`` on ``host:port``, listening already (a port in use is refused
    before any role starts), its URL printed."""
    # Imported here: the worker, scheduler and dispatcher commands need no FastAPI.
    from ..api.serving import ApiServer, listen
    from ..api.settings import ApiSettings
    from .api import announce

    settings = ApiSettings.load()
    server = ApiServer(app, listen(host, port), settings, access_log=log_level.upper() == "DEBUG")
    announce(server.url)
    return server


def _serve(app: App, **options: Any) -> None:
    """Run the roles until a stop signal, or until the store fails under them (an SQLite
    file deleted or overwritten): then say so in one line and exit with status 1."""
    # Imported here: the engines pull in aiohttp, a third of a second that the resource
    # commands sharing this module's import would pay for nothing.
    from .. import runner

    try:
        abandoned = runner.run(app, **options)
    except StoreFaultError as fault:
        CliError(str(fault)).show()
        # Thread tasks interrupted by the hurried stop may still be running: do not wait for
        # them to exit, as Python would.
        _exit_now(status=1)
    if abandoned:
        log.warning(
            "exiting now, without waiting for %d abandoned thread task(s)",
            abandoned,
            extra={"action": "process.exit"},
        )
        _exit_now(status=0)


def _exit_now(*, status: int) -> NoReturn:
    """End the process without waiting for abandoned thread tasks.

    Python joins every pool thread at exit, so a task blocked in C code would keep a stopped
    worker alive until it returns. Everything that matters is already released: the runs were
    queued again, the worker deregistered and the store closed; logs and stdio are flushed.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def setup_logging(level: str, log_format: str = "text", *, role: str = "cronbus") -> None:
    """Log to stderr: through Rich on a terminal, as plain lines otherwise (for collectors);
    with ``log_format="json"``, one JSON object per line anywhere, naming ``role``."""
    handler: logging.Handler
    if log_format.lower() == "json":
        from ..observability.logs import JsonFormatter

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter(role))
    elif sys.stderr.isatty():
        handler = RichHandler(console=Console(stderr=True), show_path=False, markup=False)
        # Rich prints the time and level itself; the logger's name says which role spoke.
        handler.setFormatter(logging.Formatter(_RICH_FORMAT))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_PLAIN_FORMAT))
    handler.addFilter(_fault_in_one_line)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def _fault_in_one_line(record: logging.LogRecord) -> bool:
    """Log a :class:`StoreFaultError` a role's loop met without its traceback: its message
    says all, and the runner reports it and stops the roles (a traceback there reads as a
    crash of cronbus)."""
    if record.exc_info and isinstance(record.exc_info[1], StoreFaultError):
        fault = str(record.exc_info[1]).replace("%", "%%")  # msg is formatted with args
        record.msg = f"{record.msg}: {fault}"
        record.exc_info = None
        record.exc_text = None
    return True
