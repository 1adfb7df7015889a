"""The HTTP API (FastAPI over :mod:`cronbus.services`): :func:`create_api`, served by
``cronbus api`` and inside ``cronbus server``."""

from __future__ import annotations

from .app import create_api
from .settings import ApiSettings

__all__ = ["ApiSettings", "create_api"]
