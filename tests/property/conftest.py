"""Property tests: Hypothesis profiles, and a count of the examples each test ran.

``CRONBUS_HYPOTHESIS_PROFILE`` picks the profile: ``quick`` (the default, and what CI runs:
a bounded, derandomized number of examples, well under a minute) or ``thorough`` (ten times
as many, random, for a local hunt). The terminal summary says how many examples ran, so the
number can be quoted.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,  # a busy machine makes any deadline flaky; the profile bounds the work
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("cronbus-quick", max_examples=800, derandomize=True, **_COMMON)
settings.register_profile("cronbus-thorough", max_examples=4000, **_COMMON)

EXAMPLES: Counter[str] = Counter()
"""Examples run, by test and store: filled by the tests, printed at the end of the session."""


def profile(scale: float = 1.0) -> settings:
    """The chosen profile, with its example count scaled (PostgreSQL runs fewer)."""
    name = os.environ.get("CRONBUS_HYPOTHESIS_PROFILE", "quick")
    chosen = settings.get_profile(f"cronbus-{name}")
    return settings(chosen, max_examples=max(1, int(chosen.max_examples * scale)))


@pytest.fixture
def examples() -> Counter[str]:
    """The session's example counter."""
    return EXAMPLES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many examples each property test ran."""
    if not EXAMPLES:
        return
    terminalreporter.section("property examples")
    for name, count in sorted(EXAMPLES.items()):
        terminalreporter.write_line(f"{name}: {count} examples")
    terminalreporter.write_line(f"total: {sum(EXAMPLES.values())} examples")
