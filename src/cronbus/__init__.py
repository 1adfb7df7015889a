"""cronbus: a distributed job scheduler and event-push platform.

Define tasks on an :class:`App`, defer runs of them, and let workers execute them with leases,
timeouts, retries and dead letters, on an embedded SQLite file or on PostgreSQL.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._version import __version__

if TYPE_CHECKING:
    from .app import App
    from .config import Settings
    from .errors import (
        Abort,
        ConfigurationError,
        CronbusError,
        InvalidArgumentError,
        InvalidTransitionError,
        RunFailedError,
        RunNotFoundError,
        RunTimeoutError,
        SerializationError,
        StoreError,
        StoreURLError,
        UnknownTaskError,
    )
    from .events.event import Event, make_event
    from .events.signing import generate_secret
    from .handle import RunHandle
    from .model import Attempt, ErrorInfo, Run
    from .retry import Retry
    from .run_context import RunContext
    from .states import AttemptOutcome, RunState
    from .task import Call, Task
    from .worker.engine import Worker
    from .worker.interrupt import CancelToken, Interrupted, current_token

__all__ = [
    "Abort",
    "App",
    "Attempt",
    "AttemptOutcome",
    "Call",
    "CancelToken",
    "ConfigurationError",
    "CronbusError",
    "ErrorInfo",
    "Event",
    "Interrupted",
    "InvalidArgumentError",
    "InvalidTransitionError",
    "Retry",
    "Run",
    "RunContext",
    "RunFailedError",
    "RunHandle",
    "RunNotFoundError",
    "RunState",
    "RunTimeoutError",
    "SerializationError",
    "Settings",
    "StoreError",
    "StoreURLError",
    "Task",
    "UnknownTaskError",
    "Worker",
    "__version__",
    "current_token",
    "generate_secret",
    "make_event",
]

# Where each public name is defined. They are imported on first use, so that `import cronbus`
# (which every `cronbus ...` command and `python -m cronbus` pays) does not import the app, the
# stores and the worker: `cronbus --help` needs none of them.
_SOURCES = {
    "App": ".app",
    "Settings": ".config",
    **dict.fromkeys(
        (
            "Abort",
            "ConfigurationError",
            "CronbusError",
            "InvalidArgumentError",
            "InvalidTransitionError",
            "RunFailedError",
            "RunNotFoundError",
            "RunTimeoutError",
            "SerializationError",
            "StoreError",
            "StoreURLError",
            "UnknownTaskError",
        ),
        ".errors",
    ),
    "Event": ".events.event",
    "make_event": ".events.event",
    "generate_secret": ".events.signing",
    "RunHandle": ".handle",
    "Attempt": ".model",
    "ErrorInfo": ".model",
    "Run": ".model",
    "Retry": ".retry",
    "RunContext": ".run_context",
    "AttemptOutcome": ".states",
    "RunState": ".states",
    "Call": ".task",
    "Task": ".task",
    "Worker": ".worker.engine",
    "CancelToken": ".worker.interrupt",
    "Interrupted": ".worker.interrupt",
    "current_token": ".worker.interrupt",
}

if not TYPE_CHECKING:
    # Hidden from type checkers, which see the imports above: a module __getattr__ would make
    # them accept any misspelt `cronbus.Nmae` as Any.

    def __getattr__(name: str) -> object:
        """Import a public name's module on first use and keep the name here."""
        source = _SOURCES.get(name)
        if source is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source, __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        """The module's names, the public ones not yet imported included."""
        return sorted({*globals(), *__all__})
