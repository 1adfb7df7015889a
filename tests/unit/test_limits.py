"""Limits: rate parsing, and which picked runs a claim admits."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronbus.distribution.limits import (
    MAX_PERIOD,
    MAX_STARTS,
    Limited,
    Rate,
    Window,
    admit,
    parse_rate,
    window_start,
)
from cronbus.errors import InvalidArgumentError

# -- parse_rate ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100/m", Rate(100, 60.0)),
        ("5/s", Rate(5, 1.0)),
        ("1000/h", Rate(1000, 3600.0)),
        ("10/d", Rate(10, 86400.0)),
        ("3/10s", Rate(3, 10.0)),
        ("3/10 s", Rate(3, 10.0)),
        (" 7 / 2 minutes ", Rate(7, 120.0)),
        ("1/H", Rate(1, 3600.0)),
        ("2/sec", Rate(2, 1.0)),
        ("1/7d", Rate(1, MAX_PERIOD)),
        ("10000/s", Rate(10_000, 1.0)),
        (f"{MAX_STARTS}/d", Rate(MAX_STARTS, 86400.0)),
    ],
)
def test_parse_rate(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0/m", "1 to 1,000,000 starts"),
        ("-1/s", "must read like"),
        ("x", "must read like"),
        ("", "must read like"),
        ("5", "must read like"),
        ("5/", "must read like"),
        ("/m", "must read like"),
        ("1.5/m", "must read like"),
        ("5/fortnight", "unknown unit"),
        ("5/0s", "period of 1 second to 7 days"),
        ("5/8d", "period of 1 second to 7 days"),
        ("10001/s", "at most 10,000 starts a second"),
        ("2000000/d", "1 to 1,000,000 starts"),
        ("5/\u0663s", "must read like"),  # a non-ASCII digit
        (5, "must read like"),
        (None, "must read like"),
    ],
)
def test_parse_rate_refuses(text: object, words: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_rate(text)
    assert words in str(caught.value)
    assert caught.value.field == "rate"


def test_parse_rate_names_the_field() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_rate("often", "options.rate")
    assert caught.value.field == "options.rate"
    assert str(caught.value).startswith("options.rate ")


# -- window_start --------------------------------------------------------------------------------


def test_window_start() -> None:
    assert window_start(125.0, 60.0) == 120.0
    assert window_start(120.0, 60.0) == 120.0
    assert window_start(119.999, 60.0) == 60.0
    assert window_start(0.5, 1.0) == 0.0


# -- admit ---------------------------------------------------------------------------------------


def limited(key: str | None = None, most: int | None = None, rate: str | None = None) -> Limited:
    """A picked run with a concurrency limit and/or a rate (``"n/period"``) on its key."""
    parsed = parse_rate(rate) if rate else None
    return Limited(
        limit_key=key if most is not None else None,
        limit_max=most,
        rate_key=key if parsed else None,
        rate_max=parsed.max if parsed else None,
        rate_period=parsed.period if parsed else None,
    )


def test_admit_plain_runs_all_fit() -> None:
    kept, windows = admit([Limited(), Limited(), Limited()], {}, {}, 10.0)
    assert kept == [0, 1, 2]
    assert windows == {}


def test_admit_keeps_pick_order_with_a_shared_key() -> None:
    picked = [limited("a", 2), Limited(), limited("a", 2), limited("b", 1), limited("a", 2)]
    kept, _ = admit(picked, {}, {}, 0.0)
    assert kept == [0, 1, 2, 3]


def test_admit_counts_running() -> None:
    picked = [limited("a", 3), limited("a", 3), limited("b", 1), limited("c", 2)]
    kept, _ = admit(picked, {"a": 2, "b": 1, "unrelated": 9}, {}, 0.0)
    assert kept == [0, 3]


def test_admit_running_over_the_limit_admits_none() -> None:
    kept, _ = admit([limited("a", 1)], {"a": 4}, {}, 0.0)
    assert kept == []


def test_admit_rate_within_one_window() -> None:
    picked = [limited("r", rate="2/m") for _ in range(4)]
    kept, windows = admit(picked, {}, {}, 130.0)
    assert kept == [0, 1]
    assert windows == {"r": Window(window_start=120.0, used=2, max_starts=2, period=60.0)}


def test_admit_rate_continues_a_stored_window() -> None:
    stored = {"r": Window(window_start=120.0, used=2, max_starts=3, period=60.0)}
    kept, windows = admit([limited("r", rate="3/m")] * 2, {}, stored, 179.9)
    assert kept == [0]
    assert windows["r"] == Window(window_start=120.0, used=3, max_starts=3, period=60.0)


def test_admit_rate_full_window_resets_at_the_boundary() -> None:
    stored = {"r": Window(window_start=120.0, used=3, max_starts=3, period=60.0)}
    assert admit([limited("r", rate="3/m")], {}, stored, 179.999) == ([], {})
    kept, windows = admit([limited("r", rate="3/m")] * 4, {}, stored, 180.0)
    assert kept == [0, 1, 2]
    assert windows["r"] == Window(window_start=180.0, used=3, max_starts=3, period=60.0)


def test_admit_a_claim_behind_the_stored_window_starts_none_of_its_runs() -> None:
    # Another claim with a later clock opened the window at 180; this one, at 170, would
    # otherwise count in a fresh window at 120 and write it back over the newer one.
    stored = {"r": Window(window_start=180.0, used=1, max_starts=3, period=60.0)}
    kept, windows = admit([limited("r", rate="3/m"), Limited()], {}, stored, 170.0)
    assert kept == [1]
    assert windows == {}


def test_admit_returns_only_windows_used() -> None:
    stored = {
        "r": Window(window_start=0.0, used=0, max_starts=5, period=60.0),
        "s": Window(window_start=0.0, used=1, max_starts=5, period=60.0),
    }
    kept, windows = admit([limited("r", rate="5/m"), Limited()], {}, stored, 30.0)
    assert kept == [0, 1]
    assert set(windows) == {"r"}
    assert windows["r"].used == 1


def test_admit_uses_the_runs_own_rate_max() -> None:
    # The task's rate went from 10/m to 2/m: the stored window already holds 3 starts.
    stored = {"r": Window(window_start=0.0, used=3, max_starts=10, period=60.0)}
    assert admit([limited("r", rate="2/m")], {}, stored, 30.0) == ([], {})


def test_admit_both_limits_must_fit() -> None:
    both = Limited(limit_key="a", limit_max=1, rate_key="a", rate_max=5, rate_period=60.0)
    kept, windows = admit([both, both], {}, {}, 0.0)
    assert kept == [0]
    assert windows["a"].used == 1  # the refused second run used no start
    rate_full = {"a": Window(window_start=0.0, used=5, max_starts=5, period=60.0)}
    kept, windows = admit([both], {}, rate_full, 1.0)
    assert (kept, windows) == ([], {})


def test_admit_does_not_change_its_inputs() -> None:
    running = {"a": 0}
    stored = {"r": Window(window_start=0.0, used=0, max_starts=5, period=60.0)}
    admit([limited("a", 1), limited("r", rate="5/m")], running, stored, 1.0)
    assert running == {"a": 0}
    assert stored["r"].used == 0


# -- property: over any sequence of claims, limits hold ------------------------------------------

KEYS = {
    # key: (limit_max or None, rate or None)
    "a": (2, None),
    "b": (None, Rate(3, 10.0)),
    "c": (1, Rate(2, 5.0)),
    "d": (None, None),
}


def run_of(key: str) -> Limited:
    """A picked run of ``key``, with the key's limits."""
    most, rate = KEYS[key]
    return Limited(
        limit_key=key if most is not None else None,
        limit_max=most,
        rate_key=key if rate else None,
        rate_max=rate.max if rate else None,
        rate_period=rate.period if rate else None,
    )


steps = st.lists(
    st.tuples(
        st.floats(0.0, 7.0),  # time that passes
        st.integers(0, 3),  # runs that end (oldest first)
        st.lists(st.sampled_from(sorted(KEYS)), max_size=6),  # the claim's picked runs
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(steps)
def test_limits_hold_over_any_claims(sequence: list[tuple[float, int, list[str]]]) -> None:
    now = 1_000.0
    active: list[str] = []  # keys of active runs, oldest first
    windows: dict[str, Window] = {}
    starts: Counter[tuple[str, int]] = Counter()
    for elapsed, ending, keys in sequence:
        now += elapsed
        del active[:ending]
        picked = [run_of(key) for key in keys]
        kept, written = admit(picked, Counter(active), windows, now)
        assert kept == sorted(set(kept))
        windows.update(written)
        for index in kept:
            key = keys[index]
            active.append(key)
            _, rate = KEYS[key]
            if rate:
                starts[key, math.floor(now / rate.period)] += 1
        for key, (most, _) in KEYS.items():
            if most is not None:
                assert active.count(key) <= most
    for (key, _), count in starts.items():
        rate = KEYS[key][1]
        assert rate is not None
        assert count <= rate.max


@given(st.lists(st.sampled_from(sorted(KEYS)), max_size=20))
def test_admit_refuses_only_what_does_not_fit(keys: list[str]) -> None:
    kept, _ = admit([run_of(key) for key in keys], {}, {}, 0.0)
    expected = []
    counts: Counter[str] = Counter()
    for index, key in enumerate(keys):
        most, rate = KEYS[key]
        bound = min(x for x in (most, rate.max if rate else None, len(keys)) if x is not None)
        if counts[key] < bound:
            counts[key] += 1
            expected.append(index)
    assert kept == expected
