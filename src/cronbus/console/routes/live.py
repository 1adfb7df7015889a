"""Console section: live (being built)."""

from __future__ import annotations

from .common import console_router

router = console_router()
