"""Subscription filters: patterns on type, source and subject, conditions on data fields."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronbus.errors import InvalidArgumentError
from cronbus.events import Event, Filter, make_event
from cronbus.events.filters import glob


def ev(
    type: str = "order.created",
    data: Any = None,
    *,
    source: str = "shop",
    subject: str | None = None,
) -> Event:
    return make_event(type, data, source=source, subject=subject, time=0.0)


def data_filter(spec: dict[str, Any]) -> Filter:
    return Filter.from_json({"data": spec})


def field_matches(conditions: list[Any], value: Any) -> bool:
    """Whether ``{"f": conditions}`` matches data whose field f holds ``value``."""
    return data_filter({"f": conditions}).matches(ev(data={"f": value}))


# -- patterns -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("patterns", "type", "expected"),
    [
        (["order.created"], "order.created", True),
        (["order.created"], "order.created.v2", False),
        (["order.created"], "Order.created", False),
        (["order.*"], "order.created", True),
        (["order.*"], "order.created.v2", True),
        (["order.*"], "order", False),
        (["order.*"], "orders.created", False),
        (["order.*"], "reorder.created", False),
        (["*.created"], "order.created", True),
        (["*.created"], "order.created.v2", False),
        (["order.*.v2"], "order.created.v2", True),
        (["order.*.v2"], "order.v2", False),
        (["*"], "anything.at-all", True),
        (["a*b*c"], "abc", True),
        (["a*b*c"], "aXbYc", True),
        (["a*b*c"], "acb", False),
        (["a*a"], "a", False),
        (["*ab*b"], "ab", False),
        (["*ab*b"], "abb", True),
        (["a*b*b"], "ab", False),
        (["order?"], "orders", False),
        (["order[s]"], "order[s]", True),
        (["invoice.paid", "order.*"], "invoice.paid", True),
        (["invoice.paid", "order.*"], "order.x", True),
        (["invoice.paid", "order.*"], "invoice.sent", False),
    ],
)
def test_type_patterns(patterns: list[str], type: str, expected: bool) -> None:
    assert Filter(types=patterns).matches(ev(type)) is expected


def test_a_single_pattern_may_be_given_as_a_string() -> None:
    assert Filter(types="order.*") == Filter(types=["order.*"])
    assert Filter.from_json({"types": "order.*"}).to_json() == {"types": ["order.*"]}


def _reference(pattern: str, text: str) -> bool:
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, text, re.DOTALL) is not None


@settings(max_examples=1000)
@given(st.text("ab.*", max_size=8), st.text("ab.", max_size=10))
def test_glob_agrees_with_a_regular_expression(pattern: str, text: str) -> None:
    assert glob(pattern)(text) is _reference(pattern, text)


def test_glob_is_linear_where_a_regular_expression_backtracks() -> None:
    # `.*a.*a...b` on "aaa...a" makes a backtracking engine try every split of the string.
    assert not glob("*a" * 30 + "b")("a" * 10_000)


def test_source_and_subject_patterns() -> None:
    f = Filter(source=["shop/*", "billing"], subject="orders/*")
    assert f.matches(ev(source="shop/eu", subject="orders/7"))
    assert f.matches(ev(source="billing", subject="orders/"))
    assert not f.matches(ev(source="shipping", subject="orders/7"))
    assert not f.matches(ev(source="shop/eu", subject="invoices/7"))
    assert not f.matches(ev(source="shop/eu", subject=None))


def test_an_empty_filter_matches_everything() -> None:
    for f in (Filter(), Filter.from_json(None), Filter.from_json({}), data_filter({})):
        assert f.matches(ev("x", 5, subject=None))
        assert f.matches(ev("order.created", {"a": 1}, subject="s"))


def test_every_part_must_match() -> None:
    f = Filter(types=["order.*"], source="shop", data={"amount": [{"numeric": [">", 10]}]})
    assert f.matches(ev("order.paid", {"amount": 11}))
    assert not f.matches(ev("invoice.paid", {"amount": 11}))
    assert not f.matches(ev("order.paid", {"amount": 11}, source="other"))
    assert not f.matches(ev("order.paid", {"amount": 10}))


# -- data conditions ------------------------------------------------------------------------------

EXAMPLE = {
    "amount": [{"numeric": [">", 100, "<=", 1000]}],
    "status": ["paid", "shipped"],
    "customer": {"tier": [{"anything-but": ["free"]}]},
    "email": [{"suffix": "@example.com"}],
    "ref": [{"prefix": "INV-"}],
    "coupon": [{"exists": False}],
}
GOOD = {
    "amount": 250,
    "status": "paid",
    "customer": {"tier": "gold", "name": "Ada"},
    "email": "ada@example.com",
    "ref": "INV-2024-7",
}


def test_the_documented_example() -> None:
    f = data_filter(EXAMPLE)
    assert f.matches(ev(data=GOOD))
    assert f.matches(ev(data={**GOOD, "amount": 1000, "status": "shipped"}))


@pytest.mark.parametrize(
    "change",
    [
        {"amount": 100},
        {"amount": 1000.5},
        {"amount": "250"},
        {"status": "refunded"},
        {"customer": {"tier": "free"}},
        {"customer": {}},
        {"customer": "gold"},
        {"email": "ada@example.org"},
        {"ref": "inv-2024-7"},
        {"coupon": None},
        {"coupon": "SUMMER"},
    ],
)
def test_the_documented_example_refuses(change: dict[str, Any]) -> None:
    assert not data_filter(EXAMPLE).matches(ev(data={**GOOD, **change}))


@pytest.mark.parametrize(
    ("conditions", "value", "expected"),
    [
        (["paid"], "paid", True),
        (["paid"], "Paid", False),
        ([1], 1, True),
        ([1], 1.0, True),
        ([1], True, False),
        ([True], 1, False),
        ([True], True, True),
        ([0], False, False),
        ([None], None, True),
        ([None], "null", False),
        (["1"], 1, False),
        (["a"], {"a": 1}, False),
        (["a", 2], 2, True),
        ([{"prefix": "ab"}], "abc", True),
        ([{"prefix": "ab"}], "xabc", False),
        ([{"prefix": "1"}], 12, False),
        ([{"suffix": ".pdf"}], "a.pdf", True),
        ([{"suffix": ".pdf"}], "a.pdf.exe", False),
        ([{"wildcard": "INV-*-2024"}], "INV-7-2024", True),
        ([{"wildcard": "INV-*-2024"}], "INV-7-2025", False),
        ([{"numeric": ["=", 5]}], 5.0, True),
        ([{"numeric": ["=", 5]}], 5.1, False),
        ([{"numeric": [">=", 0, "<", 1]}], 0, True),
        ([{"numeric": [">=", 0, "<", 1]}], 1, False),
        ([{"numeric": [">=", 0, "<", 1]}], -0.5, False),
        ([{"numeric": [">", 0]}], True, False),
        ([{"numeric": [">", 0]}], "5", False),
        ([{"exists": True}], None, True),
        ([{"exists": True}], {}, True),
        ([{"exists": False}], 0, False),
        ([{"anything-but": "free"}], "gold", True),
        ([{"anything-but": "free"}], "free", False),
        ([{"anything-but": ["free", "trial"]}], "trial", False),
        ([{"anything-but": 0}], "0", True),
        ([{"anything-but": {"prefix": "test-"}}], "test-1", False),
        ([{"anything-but": {"prefix": "test-"}}], "prod-1", True),
        ([{"anything-but": {"suffix": "-dev"}}], "x-dev", False),
        ([{"anything-but": {"wildcard": "*tmp*"}}], "a.tmp.b", False),
        ([{"prefix": "a"}, {"numeric": [">", 5]}], 6, True),
        ([{"prefix": "a"}, {"numeric": [">", 5]}], "abc", True),
        ([{"prefix": "a"}, {"numeric": [">", 5]}], 4, False),
    ],
)
def test_conditions_on_a_present_field(conditions: list[Any], value: Any, expected: bool) -> None:
    assert field_matches(conditions, value) is expected


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([{"exists": False}], True),
        ([{"exists": True}], False),
        (["x", {"exists": False}], True),
        ([None], False),
        ([{"anything-but": "x"}], False),
        ([{"numeric": [">", 0]}], False),
    ],
)
def test_conditions_on_an_absent_field(conditions: list[Any], expected: bool) -> None:
    f = data_filter({"f": conditions})
    assert f.matches(ev(data={"g": 1})) is expected
    assert f.matches(ev(data=None)) is expected
    assert f.matches(ev(data=["not", "an", "object"])) is expected


@pytest.mark.parametrize(
    ("conditions", "value", "expected"),
    [
        (["vip"], ["new", "vip"], True),
        (["vip"], ["new"], False),
        (["vip"], [], False),
        ([{"prefix": "eu-"}], ["us-1", "eu-2"], True),
        ([{"numeric": [">", 10]}], [1, 20], True),
        ([{"numeric": [">", 10]}], [1, 2], False),
        ([{"anything-but": "internal"}], ["public", "internal"], False),
        ([{"anything-but": "internal"}], ["public"], True),
        ([{"anything-but": "internal"}], [], True),
        ([{"exists": True}], [], True),
    ],
)
def test_conditions_on_an_array_field(conditions: list[Any], value: Any, expected: bool) -> None:
    assert field_matches(conditions, value) is expected


def test_nested_fields_descend_only_into_objects() -> None:
    f = data_filter({"customer": {"address": {"country": ["FR"]}}})
    assert f.matches(ev(data={"customer": {"address": {"country": "FR"}}}))
    assert not f.matches(ev(data={"customer": {"address": {"country": "DE"}}}))
    assert not f.matches(ev(data={"customer": [{"address": {"country": "FR"}}]}))
    assert not f.matches(ev(data={"customer": "FR"}))


def test_absence_below_a_missing_parent() -> None:
    f = data_filter({"customer": {"coupon": [{"exists": False}]}})
    assert f.matches(ev(data={}))
    assert f.matches(ev(data={"customer": None}))
    assert f.matches(ev(data={"customer": {"name": "Ada"}}))
    assert not f.matches(ev(data={"customer": {"coupon": "X"}}))


def test_field_names_are_taken_literally() -> None:
    f = data_filter({"a.b": ["x"], "prefix": {"exists": [True]}})
    assert f.matches(ev(data={"a.b": "x", "prefix": {"exists": True}}))
    assert not f.matches(ev(data={"a": {"b": "x"}, "prefix": {"exists": True}}))


# -- properties -----------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from([0.0, 1.0, 1.5, -2.5])
    | st.sampled_from(["", "a", "ab", "b", "1", "true"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner),
    max_leaves=6,
)
string_ops = st.sampled_from(["prefix", "suffix", "wildcard"])
excluded = (
    scalars
    | st.lists(scalars, min_size=1, max_size=3)
    | st.builds(lambda op, arg: {op: arg}, string_ops, st.sampled_from(["", "a", "b*", "*b"]))
)


def _as_conditions(argument: Any) -> list[Any]:
    if isinstance(argument, list):
        return argument
    return [argument]


@given(excluded, json_values)
def test_anything_but_is_the_complement_for_present_fields(argument: Any, value: Any) -> None:
    inside = field_matches(_as_conditions(argument), value)
    assert field_matches([{"anything-but": argument}], value) is not inside


@given(json_values)
def test_exists_true_and_false_split_every_field(value: Any) -> None:
    f_true, f_false = (
        data_filter({"f": [{"exists": True}]}),
        data_filter({"f": [{"exists": False}]}),
    )
    for data in ({"f": value}, {"g": value}):
        assert f_true.matches(ev(data=data)) is not f_false.matches(ev(data=data))


conditions = st.lists(
    scalars
    | st.builds(lambda op, arg: {op: arg}, string_ops, st.text("ab*", max_size=3))
    | st.builds(
        lambda op, bound: {"numeric": [op, bound]},
        st.sampled_from(["=", "<", "<=", ">", ">="]),
        st.integers(-3, 3) | st.floats(-3, 3),
    )
    | st.builds(lambda b: {"exists": b}, st.booleans())
    | st.builds(lambda a: {"anything-but": a}, st.lists(scalars, min_size=1, max_size=2)),
    min_size=1,
    max_size=3,
)
data_specs = st.recursive(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), conditions, min_size=1, max_size=2),
    lambda inner: st.dictionaries(
        st.sampled_from(["a", "b", "c"]), inner | conditions, min_size=1, max_size=2
    ),
    max_leaves=4,
)
patterns = st.lists(st.text("ab.*", min_size=1, max_size=5), min_size=1, max_size=3)
specs = st.fixed_dictionaries(
    {},
    optional={"types": patterns, "source": patterns, "subject": patterns, "data": data_specs},
)


@given(specs, json_values)
def test_json_round_trip(spec: dict[str, Any], data: Any) -> None:
    f = Filter.from_json(spec)
    stored = json.loads(json.dumps(f.to_json()))
    assert stored == spec
    again = Filter.from_json(stored)
    assert again == f
    assert hash(again) == hash(f)
    event = ev("a.b", data, source="ab", subject="b.a")
    assert again.matches(event) is f.matches(event)


def test_to_json_hands_out_copies() -> None:
    f = Filter(types=["a"], data={"x": ["y"]})
    f.to_json()["data"]["x"].append("z")
    assert f.to_json() == {"types": ["a"], "data": {"x": ["y"]}}


def test_filters_with_different_specs_differ() -> None:
    assert Filter(types=["a"]) != Filter(types=["b"])
    assert Filter(types=["a"]) != Filter(source=["a"])
    assert Filter() != "Filter()"
    assert repr(Filter(types="a")) == 'Filter.from_json({"types": ["a"]})'


# -- bad specs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([], "filter: expected an object, got []"),
        ({"type": ["a"]}, "filter: unknown key 'type' (expected types, source, subject, data)"),
        ({"types": []}, "filter.types: an empty list matches nothing; leave the key out"),
        ({"types": 5}, "filter.types: expected a pattern or a list of patterns, got 5"),
        ({"types": ["a", ""]}, 'filter.types[1]: expected a non-empty string, got ""'),
        ({"source": [None]}, "filter.source[0]: expected a non-empty string, got null"),
        ({"subject": {"a": 1}}, "filter.subject: expected a pattern or a list of patterns"),
        ({"data": ["a"]}, 'filter.data: expected an object, got ["a"]'),
        (
            {"data": {"amount": [{"between": [1, 2]}]}},
            "filter.data.amount[0]: unknown operator 'between' (expected one of anything-but, "
            "exists, numeric, prefix, suffix, wildcard)",
        ),
        (
            {"data": {"a": "x"}},
            'filter.data.a: expected a list of values or conditions, e.g. ["x"]',
        ),
        (
            {"data": {"ref": {"prefix": "INV-"}}},
            'filter.data.ref.prefix: an operator goes inside a list: [{"prefix": "INV-"}]',
        ),
        ({"data": {"a": []}}, "filter.data.a: an empty list matches nothing"),
        ({"data": {"a": {}}}, "filter.data.a: an empty object has no condition"),
        ({"data": {"a": [["x"]]}}, "filter.data.a[0]: expected a string, number, boolean, null"),
        ({"data": {"a": [float("nan")]}}, "filter.data.a[0]: expected a string, number"),
        (
            {"data": {"a": [{"prefix": "x", "suffix": "y"}]}},
            "filter.data.a[0]: expected one operator per object, got 2",
        ),
        ({"data": {"a": [{}]}}, "filter.data.a[0]: expected one operator per object, got 0"),
        ({"data": {"a": [{"prefix": 5}]}}, "filter.data.a[0].prefix: expected a string, got 5"),
        ({"data": {"a": [{"wildcard": None}]}}, "filter.data.a[0].wildcard: expected a string"),
        ({"data": {"a": [{"exists": "yes"}]}}, "filter.data.a[0].exists: expected true or false"),
        ({"data": {"a": [{"exists": 1}]}}, "filter.data.a[0].exists: expected true or false"),
        ({"data": {"a": [{"numeric": 5}]}}, "filter.data.a[0].numeric: expected pairs"),
        ({"data": {"a": [{"numeric": [">"]}]}}, "filter.data.a[0].numeric: expected pairs"),
        ({"data": {"a": [{"numeric": []}]}}, "filter.data.a[0].numeric: expected pairs"),
        (
            {"data": {"a": [{"numeric": [">", 1, "~", 2]}]}},
            'filter.data.a[0].numeric[2]: unknown comparison "~" (expected one of =, <, <=',
        ),
        (
            {"data": {"a": [{"numeric": [">", "1"]}]}},
            'filter.data.a[0].numeric[1]: expected a number, got "1"',
        ),
        (
            {"data": {"a": [{"numeric": [">", True]}]}},
            "filter.data.a[0].numeric[1]: expected a number, got true",
        ),
        (
            {"data": {"a": [{"anything-but": []}]}},
            "filter.data.a[0].anything-but: an empty list excludes nothing",
        ),
        (
            {"data": {"a": [{"anything-but": [{"prefix": "x"}]}]}},
            "filter.data.a[0].anything-but[0]: expected a string, number",
        ),
        (
            {"data": {"a": [{"anything-but": {"numeric": [">", 1]}}]}},
            "filter.data.a[0].anything-but: anything-but takes a value, a list of values, or one "
            "prefix, suffix or wildcard object, not 'numeric'",
        ),
        (
            {"data": {"a": [{"anything-but": {"prefix": 1}}]}},
            "filter.data.a[0].anything-but.prefix: expected a string, got 1",
        ),
        (
            {"data": {"a": {"b": {"c": [{"nope": 1}]}}}},
            "filter.data.a.b.c[0]: unknown operator 'nope'",
        ),
    ],
)
def test_bad_specs_name_the_offending_path(spec: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        Filter.from_json(spec)
    assert str(caught.value).startswith(message)


def test_deep_nesting_is_refused() -> None:
    spec: Any = ["x"]
    for _ in range(40):
        spec = {"a": spec}
    with pytest.raises(InvalidArgumentError, match="nested deeper than 32 levels"):
        data_filter(spec)
