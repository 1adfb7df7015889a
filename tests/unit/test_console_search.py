"""The runs search of the console: qualifiers parsed into a search and written back (the same
search again, for any search), its query for the runs service, and a clear error, naming the
search box, for every kind of mistake."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronbus.console.search import MAX_AGE, RunSearch, format, parse
from cronbus.errors import InvalidArgumentError
from cronbus.states import RunState
from cronbus.validation import check_label


def test_every_qualifier_is_read() -> None:
    search = parse(
        "state:dead,failed task:send_email queue:emails job:nightly id:42 args.user:42 "
        'args.0:"a b" args.name:ada args.tags:["x", "y"] args.on:true args.none:null '
        "created>:2h created<:2024-05-01T12:00Z"
    )
    assert search == RunSearch(
        states=(RunState.DEAD, RunState.FAILED),
        task="send_email",
        queue="emails",
        job="nightly",
        id=42,
        args=(
            ("user", 42),
            ("0", "a b"),
            ("name", "ada"),
            ("tags", ["x", "y"]),
            ("on", True),
            ("none", None),
        ),
        created_after=timedelta(hours=2),
        created_before=datetime(2024, 5, 1, 12, tzinfo=UTC),
    )


def test_values_are_json_when_they_read_as_json_and_text_otherwise() -> None:
    values = dict(
        parse('args.a:42 args.b:"42" args.c:4.5 args.d:-1e3 args.e:x42 args.f:{"k": 1}').args
    )
    assert values == {"a": 42, "b": "42", "c": 4.5, "d": -1000.0, "e": "x42", "f": {"k": 1}}
    assert isinstance(values["a"], int)
    assert isinstance(values["b"], str)


def test_states_merge_and_qualifier_names_ignore_case() -> None:
    search = parse("State:dead state:failed,dead TASK:x")
    assert search.states == (RunState.DEAD, RunState.FAILED)
    assert search.task == "x"


def test_an_empty_search_is_every_run() -> None:
    assert parse("") == RunSearch()
    assert parse("   ") == RunSearch()
    assert parse("").empty
    assert format(RunSearch()) == ""


def test_the_query_counts_ages_back_from_now() -> None:
    search = parse("created>:1h created<:2024-05-01 task:x args.user:7 id:3 state:dead")
    query = search.query(now=10_000.0)
    assert query.created_after == 10_000.0 - 3600
    assert query.created_before == datetime(2024, 5, 1, tzinfo=UTC).timestamp()
    assert (query.task, query.id, tuple(query.args)) == ("x", 3, (("user", 7),))
    assert tuple(query.states) == (RunState.DEAD,)
    assert parse("").query().created_after is None


def test_format_quotes_what_needs_quotes() -> None:
    search = RunSearch(task="a:b", args=(("name", "Ada Lovelace"), ("code", "42"), ("x", "[")))
    text = format(search)
    assert text == 'task:a:b args.name:"Ada Lovelace" args.code:"42" args.x:"["'
    assert parse(text) == search


def test_times_in_other_zones_are_read_as_utc_instants() -> None:
    search = parse('created>:2024-05-01T14:00+02:00 created<:"2024-05-02 00:00"')
    assert search.created_after == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert search.created_before == datetime(2024, 5, 2, tzinfo=UTC)
    assert format(search) == "created>:2024-05-01T12:00:00Z created<:2024-05-02T00:00:00Z"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("send_email", "words need a qualifier; say task:send_email"),
        ("dead", "say state:dead"),
        ("42", "say id:42"),
        ("created>1h", "say created>:1h"),
        ("colour:red", "unknown qualifier 'colour:'"),
        ("task:", "task: needs a value right after the colon, like task:send_email"),
        ("task: x", "task: needs a value"),
        ("state:zombie", "state:'zombie' is not a run state; the states are scheduled"),
        ("state:42", "state:'42' is not a run state"),
        ("state:[1]", "state: takes text"),
        ("task:a task:b", "task: given twice"),
        ("id:1 id:2", "id: given twice"),
        ("args.u:1 args.u:2", "args.u: given twice"),
        ("id:abc", "id: takes a run id (a whole number), got 'abc'"),
        ("id:1.5", "id: takes a run id"),
        ("id:0", "id: must be a whole number from 1"),
        ('id:"7"', "id: takes a run id"),
        ("args.:1", "name a keyword argument (args.user:42) or a position from 0"),
        ("args.01:1", "name a keyword argument"),
        ("args.a-b:1", "name a keyword argument"),
        ('args.x:"open', "is not valid JSON"),
        ("args.x:[1,", "is not valid JSON"),
        ("args.x:[NaN]", "is not valid JSON"),
        ("args.x:1e999", "args.x: numbers must be finite"),
        ("args.x:99999999999999999999", "args.x: 99999999999999999999 is beyond 64-bit integers"),
        ('args.x:"a\\u0000"', "args.x: a value cannot hold the NUL character"),
        ('args.x:"a"b', "put a space after its value"),
        ("created>:yesterday", "is neither an ISO time (2024-05-01, 2024-05-01T12:00Z) nor an age"),
        ("created<:1y", "is neither an ISO time"),
        ("created>:99999999d", "is older than cronbus goes back"),
        ("created>:1969-12-31", "before 1970-01-01"),
        ("created>:1h created>:2h", "created>: given twice"),
        ("queue:a/b", "queue: must be 1 to 100 ASCII letters"),
        ('task:"a b"', "task: must not hold whitespace"),
    ],
)
def test_every_mistake_says_what_to_write(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse(text)
    assert caught.value.field == "q"
    assert message in str(caught.value), str(caught.value)


def test_text_must_be_text() -> None:
    with pytest.raises(InvalidArgumentError, match="the search must be text") as caught:
        parse(42)  # type: ignore[arg-type]
    assert caught.value.field == "q"


# -- round trip --------------------------------------------------------------------------------


def _label(text: str) -> bool:
    try:
        check_label(text, "x")
    except Exception:
        return False
    return True


labels = st.text(min_size=1, max_size=30).filter(_label)
queues = st.from_regex(r"[A-Za-z0-9_.-]{1,20}", fullmatch=True)
keys = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
    st.integers(0, 999_999).map(str),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20).filter(lambda s: "\x00" not in s),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=5).filter(lambda s: "\x00" not in s), inner, max_size=3),
    ),
    max_leaves=6,
)
instants = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
ages = st.integers(1, int(MAX_AGE.total_seconds())).map(lambda s: timedelta(seconds=s))
bounds = st.one_of(st.none(), instants, ages)


@st.composite
def searches(draw: st.DrawFn) -> RunSearch:
    matches = draw(st.dictionaries(keys, values, max_size=3))
    return RunSearch(
        states=tuple(draw(st.lists(st.sampled_from(list(RunState)), unique=True, max_size=4))),
        task=draw(st.none() | labels),
        queue=draw(st.none() | queues),
        job=draw(st.none() | labels),
        id=draw(st.none() | st.integers(1, 2**63 - 1)),
        args=tuple(matches.items()),
        created_after=draw(bounds),
        created_before=draw(bounds),
    )


def _typed(value: Any) -> str:
    """A JSON text that tells 1 from 1.0 from true (Python's == does not)."""
    return json.dumps(value, sort_keys=False) + repr(value)


@given(searches())
def test_format_then_parse_gives_the_same_search(search: RunSearch) -> None:
    again = parse(format(search))
    assert again == search
    assert [_typed(v) for _, v in again.args] == [_typed(v) for _, v in search.args]
    assert format(again) == format(search)


@given(st.text(max_size=60))
def test_any_text_is_a_search_or_a_clear_error(text: str) -> None:
    try:
        search = parse(text)
    except InvalidArgumentError as exc:
        error: InvalidArgumentError | None = exc
    else:
        error = None
        assert parse(format(search)) == search
    if error is not None:
        assert error.field == "q"
        assert str(error)
