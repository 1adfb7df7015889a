"""cronbus: a distributed job scheduler and event-push platform.

Define tasks on an :class:`App`, defer runs of them, and let workers execute them with leases,
timeouts, retries and dead letters, on an embedded SQLite file or on PostgreSQL.
"""

from __future__ import annotations

from ._version import __version__
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
