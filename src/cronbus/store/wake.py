"""Wake-ups between processes on one machine, for stores without LISTEN/NOTIFY.

Each process that listens opens one UNIX datagram socket and registers its address in the store:
in Linux's abstract namespace, so nothing is left on disk, or where that namespace does not exist
(macOS, the BSDs) at a path in a private temporary folder, removed when the hub closes. A process
that commits work sends a one-datagram nudge, naming the channels, to every registered address;
listeners in the same process are woken directly. A nudge may be lost (a full socket buffer):
the listener's poll interval remains the safety net, so losing one costs latency, never work.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence

log = logging.getLogger("cronbus.wake")

ENDED_CHANNEL = "ended"
"""Wake-up channel: a run ended (succeeded, dead, cancelled or skipped). Only processes where a
``handle.wait()`` is waiting listen to it, and the stores nudge it only towards them (SQLite's
registry filters by channel; PostgreSQL NOTIFYs it only while a waiter holds its lock)."""


@functools.cache
def abstract_sockets() -> bool:
    """Whether this system has Linux's abstract namespace for UNIX sockets (probed once)."""
    if not hasattr(socket, "AF_UNIX"):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.bind("\0cronbus-probe-" + uuid.uuid4().hex)
    except OSError:
        return False
    finally:
        probe.close()
    return True


class LocalListener:
    """Wake-ups for one consumer: an event set by nudges on its channels."""

    def __init__(self, hub: WakeHub, channels: Sequence[str]) -> None:
        self._hub = hub
        self.channels = frozenset(channels)
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def _wake(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._event.set()
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout: float) -> bool:
        """Wait for a nudge or ``timeout`` seconds; True if nudged (the nudge is consumed)."""
        if not self._event.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, timeout)):
                    await self._event.wait()
        woken = self._event.is_set()
        self._event.clear()
        return woken

    @property
    def active(self) -> bool:
        """False once closed, or once its hub closed (the store was closed)."""
        return self in self._hub._listeners

    async def close(self) -> None:
        """Stop receiving nudges."""
        self._hub.discard(self)


class WakeHub:
    """One process's end of the wake-up mesh for one store.

    ``abstract`` chooses the kind of address (default: abstract where the system has them, else
    a filesystem path, known once the socket is bound).
    """

    def __init__(self, *, abstract: bool | None = None) -> None:
        self._listeners: set[LocalListener] = set()
        self._channels: frozenset[str] = frozenset()
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.abstract = abstract_sockets() if abstract is None else abstract
        self.address = "\0cronbus-" + uuid.uuid4().hex if self.abstract else ""
        self._folder: str | None = None
        self.pid = os.getpid()
        self._sender: socket.socket | None = None
        self._sender_lock = threading.Lock()

    @property
    def bound(self) -> bool:
        """True once this process receives nudges from others."""
        return self._sock is not None

    def add(self, channels: Sequence[str]) -> LocalListener:
        """A new listener; binds the socket on first use."""
        listener = LocalListener(self, channels)
        self._listeners.add(listener)
        self._channels = frozenset(self.channels())
        if self._sock is None:
            self._bind()
        return listener

    def discard(self, listener: LocalListener) -> None:
        """Forget a listener."""
        self._listeners.discard(listener)
        self._channels = frozenset(self.channels())

    def channels(self) -> set[str]:
        """Every channel some listener here waits on."""
        return {c for listener in self._listeners for c in listener.channels}

    @property
    def local_channels(self) -> frozenset[str]:
        """:meth:`channels`, kept up to date as listeners come and go (cheap to test)."""
        return self._channels

    def wake_local(self, channels: Iterable[str]) -> None:
        """Wake this process's listeners of ``channels``."""
        wanted = set(channels)
        for listener in list(self._listeners):
            if listener.channels & wanted:
                listener._wake()

    def send(self, addresses: Iterable[str], channels: Sequence[str]) -> list[str]:
        """Nudge other processes; return the addresses nobody listens on any more."""
        payload = ",".join(channels).encode()
        if self._sender is None:
            # A store may nudge from its thread (before a commit) and from the loop's.
            with self._sender_lock:
                if self._sender is None:
                    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    sender.setblocking(False)
                    self._sender = sender
        gone = []
        for address in addresses:
            if address == self.address:
                continue
            try:
                self._sender.sendto(payload, address)
            except (ConnectionRefusedError, FileNotFoundError):
                gone.append(address)
            except BlockingIOError:
                # The receiver is busy and its buffer full: it is awake anyway.
                pass
            except OSError as exc:
                log.debug("wake-up to a listener failed: %s", exc)
        return gone

    def _bind(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        if not self.abstract:
            # mkdtemp makes the folder readable by this user only: nobody else can nudge or
            # replace the socket. Short, so the path fits sun_path (104 bytes on macOS).
            self._folder = tempfile.mkdtemp(prefix="cronbus-")
            self.address = os.path.join(self._folder, "wake")
        try:
            sock.bind(self.address)
        except OSError:
            sock.close()
            self._remove_folder()
            raise
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        assert self._sock is not None
        channels: set[str] = set()
        while True:
            try:
                data = self._sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                break
            channels.update(data.decode(errors="replace").split(","))
        self.wake_local(channels)

    def close(self) -> None:
        """Close the sockets."""
        if self._sock is not None:
            if self._loop is not None and not self._loop.is_closed():
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self._sender is not None:
            self._sender.close()
            self._sender = None
        self._remove_folder()
        self._listeners.clear()
        self._channels = frozenset()

    def _remove_folder(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
