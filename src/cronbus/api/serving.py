"""Serving the API with uvicorn on an event loop shared with other roles.

:func:`listen` binds the socket first, so a port in use is one clear error before anything
starts (uvicorn would exit the process instead). :class:`ApiServer` runs uvicorn's ``Server`` as
a coroutine without its signal handlers: the process's own handlers (``cronbus server``'s
runner, or ``cronbus api``) stop it through :meth:`ApiServer.stop`, together with the other
roles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Iterator

import uvicorn

from ..app import App
from ..errors import ConfigurationError
from ..observability.exposition import served
from .app import create_api
from .settings import ApiSettings

log = logging.getLogger("cronbus.api")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (port 0: any free one), or a ConfigurationError."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, leaving signals to the process that runs it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Install nothing: :meth:`ApiServer.stop` is how this server stops."""
        yield


class ApiServer:
    """The API of ``app`` served on ``sock`` until :meth:`stop`."""

    def __init__(
        self,
        app: App,
        sock: socket.socket,
        settings: ApiSettings | None = None,
        *,
        access_log: bool = False,
    ) -> None:
        self.sock = sock
        config = uvicorn.Config(
            create_api(app, settings),
            lifespan="on",
            log_config=None,  # the process's logging, as set up by the command
            access_log=access_log,
            server_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=10,
        )
        self.server = _Server(config)

    @property
    def url(self) -> str:
        """The base URL the API answers on (``http://127.0.0.1:8787``)."""
        host, port = self.sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    @property
    def started(self) -> bool:
        """True once the server accepts requests."""
        return bool(self.server.started)

    async def serve(self) -> None:
        """Serve until :meth:`stop`; the app is opened (nested) while serving."""
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            self.sock.close()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return bool(self.server.should_exit)

    def stop(self, *, hurry: bool = False) -> None:
        """Stop accepting requests; requests in flight get a few seconds to end (none with
        ``hurry``)."""
        # uvicorn's graceful shutdown waits for open responses: a console tab's live stream
        # would hold it for the whole timeout, so the streams end first.
        from ..console.routes.live import stop_streams

        stop_streams(self.server.config.app)
        self.server.should_exit = True
        if hurry:
            self.server.force_exit = True


def _metrics_served(
    app: App, sock: socket.socket | None
) -> contextlib.AbstractAsyncContextManager[object]:
    """Serve ``/metrics`` on ``sock`` (if any) beside the API's own ``/metrics``."""
    return contextlib.nullcontext() if sock is None else served(app, sock)


async def serve_api(
    server: ApiServer,
    app: App,
    *,
    install_signals: bool = True,
    on_open: Callable[[str], None] | None = None,
    metrics: socket.socket | None = None,
) -> None:
    """Open ``app`` and serve its API until SIGTERM or SIGINT (``cronbus api``); once the
    store is open, ``on_open`` is called with the URL. ``metrics``: a listening socket to
    serve ``/metrics`` on besides the API's own port."""
    async with app, _metrics_served(app, metrics):
        if on_open is not None:
            on_open(server.url)
        if install_signals:
            loop = asyncio.get_running_loop()

            def handle(signum: int) -> None:
                log.info("received %s: stopping the API", signal.Signals(signum).name)
                server.stop(hurry=server.stopping)

            for signum in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(signum, handle, signum)
        await server.serve()
