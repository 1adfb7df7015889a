"""Values for the property tests: each field of a call is drawn good, or now and then wild.

Wild values mix ordinary ones with those seen breaking cronbus (NUL, lone surrogates, 1e300,
NaN, huge texts, non-string keys, reserved topics); a call usually carries one wild value among
good ones, so both acceptance and each refusal are exercised, and a failure shrinks to the one
field that caused it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

SEEN = [
    "",
    " ",
    "a b",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udcff",
    "\n",
    "cronbus.runs",
    "cronbus.x",
    "x" * 300,
    "k" * 1000,
    "-",
    "--help",
    "order.created",
    "https://example.com/a?b#c",
    "urn:shop:orders",
    "1x:y",
    "é",
    "0 0 12 ? * 6#3",
    "0 5-5 * * *",
    "2026-05-01T12:00:00+02:00",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00",
]
texts = st.one_of(
    st.sampled_from(SEEN),
    st.text(max_size=20),
    st.text(st.characters(exclude_categories=()), max_size=8),  # surrogates included
)
numbers = st.one_of(
    st.sampled_from([0, -1, 1e-9, 1e12, 1e300, -1e300, 1e308, 253_402_300_800, 2**63, 10**30]),
    st.integers(),
    st.floats(),
)
wild_scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
wild_payloads = st.recursive(
    wild_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(texts, inner, max_size=4),
        st.dictionaries(st.one_of(st.integers(), st.none(), st.booleans()), inner, max_size=2),
    ),
    max_leaves=12,
) | st.sampled_from([{1, 2}, b"bytes", object(), [[[[[[]]]]]], "x" * 2_000_000])

GOOD_TEXT = st.text(st.characters(categories=["L", "N", "P", "S"]) | st.just(" "), max_size=12)
GOOD = {
    "name": st.from_regex(r"[a-z][a-z0-9_.-]{0,11}", fullmatch=True),
    "text": GOOD_TEXT.filter(bool),
    "type": st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,8}){0,2}", fullmatch=True),
    "source": st.sampled_from(["cronbus", "/orders", "https://x.example/y?z=1", "urn:a:b"]),
    "id": st.from_regex(r"[A-Za-z0-9-]{1,20}", fullmatch=True),
    "seconds": st.floats(0.001, 1e6) | st.integers(1, 10**6),
    "time": st.floats(0, 4e9)
    | st.datetimes(datetime(1970, 1, 2), datetime(9999, 12, 30), timezones=st.just(UTC)),
    "priority": st.integers(-1000, 1000),
    "payload": st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | GOOD_TEXT,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(GOOD_TEXT, inner, max_size=3),
        max_leaves=8,
    ),
    "cron": st.sampled_from(["* * * * *", "0 9 * * MON-FRI", "*/5 * * * * *", "0 0 1 1 *"]),
    "at": st.sampled_from(["2099-05-01T12:00:00+02:00", "9999-01-01T00:00:00Z"]),
}
WILD = {
    "name": texts,
    "text": texts,
    "type": texts,
    "source": texts,
    "id": texts,
    "seconds": st.one_of(numbers, st.timedeltas(), texts),
    "time": st.one_of(
        numbers,
        st.datetimes(timezones=st.none() | st.just(UTC) | st.just(timezone(timedelta(hours=-14)))),
        texts,
    ),
    "priority": st.one_of(numbers, texts),
    "payload": wild_payloads,
    "cron": texts,
    "at": st.one_of(texts, numbers),
}
WILD_ODDS = 5
"""One field in this many is drawn wild: a call usually has one odd value among good ones, so
both acceptance and each refusal are exercised."""


ARITY = st.sampled_from((1, 2, 1, 2, 0, 3))
"""How many arguments a call of `add(a, b=0)` gets: mostly ones it takes."""
_WILD_CHOICE = st.sampled_from((False,) * (WILD_ODDS - 1) + (True,))


class Fields:
    """Draws the fields of one call: each good, or (one in :data:`WILD_ODDS`) wild."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def __call__(self, field: str, kind: str) -> Any:
        # Good shrinks first (index 0): a failure shrinks to its one wild field.
        wild = self.data.draw(_WILD_CHOICE, label=f"{field} wild?")
        return self.data.draw(WILD[kind] if wild else GOOD[kind], label=field)

    def some(self, **fields: str) -> dict[str, Any]:
        """Each of ``fields`` (name -> kind) given or left out."""
        chosen = {}
        for field, kind in fields.items():
            if self.data.draw(st.booleans(), label=f"give {field}"):
                chosen[field] = self(field, kind)
        return chosen

    def pick(self, *choices: str) -> str:
        return self.data.draw(st.sampled_from(choices))

    def list(self, kind: str, most: int) -> list[Any]:
        count = self.data.draw(st.integers(0, most), label=f"{kind} count")
        return [self(f"{kind}[{i}]", kind) for i in range(count)]
