"""The routers of the API, one module per resource, each mounted under ``/v1``."""

from __future__ import annotations

from fastapi import APIRouter

from .health import router as health
from .runs import runs

ROUTERS: tuple[APIRouter, ...] = (health, runs)
"""Every router, in the order the OpenAPI document lists them."""
