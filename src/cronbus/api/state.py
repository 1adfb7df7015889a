"""What every request handler of one API shares: the cronbus app, the settings, the limiter."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from ..app import App
from .ratelimit import RateLimiter
from .settings import ApiSettings


@dataclass(slots=True)
class ApiState:
    """The app an API serves, its settings, and the per-token rate limiter."""

    app: App
    settings: ApiSettings
    limiter: RateLimiter
    trimmed_at: float = field(default=0.0)
    """When idempotency records were last trimmed (epoch seconds)."""


def api_state(request: Request) -> ApiState:
    """The :class:`ApiState` of the API serving ``request``."""
    state: ApiState = request.app.state.cronbus
    return state
