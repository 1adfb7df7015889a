"""What every request handler of one API shares: the cronbus app, the settings, the limiters,
and how client addresses are read."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from ..app import App
from .clients import Clients
from .ratelimit import FailureLimiter, RateLimiter
from .settings import ApiSettings


@dataclass(slots=True)
class ApiState:
    """The app an API serves, its settings, the per-token rate limiter, the limiter of failed
    token lookups per client address, and the trusted proxies."""

    app: App
    settings: ApiSettings
    limiter: RateLimiter
    failures: FailureLimiter
    clients: Clients
    trimmed_at: float = field(default=0.0)
    """When idempotency records were last trimmed (epoch seconds)."""


def api_state(request: Request) -> ApiState:
    """The :class:`ApiState` of the API serving ``request``."""
    state: ApiState = request.app.state.cronbus
    return state


def new_state(app: App, settings: ApiSettings) -> ApiState:
    """The shared state of an API serving ``app`` with ``settings``."""
    return ApiState(
        app=app,
        settings=settings,
        limiter=RateLimiter(settings.rate, settings.bucket_size),
        failures=FailureLimiter(
            settings.auth_failures, settings.auth_failure_burst, settings.auth_addresses
        ),
        clients=Clients(settings.trusted_proxies),
    )
