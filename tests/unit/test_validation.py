"""The validation layer: each rule accepts what it documents and refuses the rest, and every
error names the field and shows at most 80 characters of the value."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from cronbus.config import Settings
from cronbus.errors import (
    ConfigurationError,
    CronbusError,
    InvalidArgumentError,
    SerializationError,
)
from cronbus.serialization import check_json, encode_call, encode_value, parse_json
from cronbus.validation import (
    MAX_TIME,
    SHOWN,
    check_event_id,
    check_event_type,
    check_identifier,
    check_key,
    check_label,
    check_priority,
    check_queue,
    check_seconds,
    check_text,
    check_time,
    check_topic,
    check_uri_reference,
    shorten,
)

LONG = "x" * 100_000


def _shown(message: str) -> str:
    """The value part of a ``FIELD RULE, got VALUE`` message."""
    return message.rsplit(", got ", 1)[-1]


# -- shorten -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value", [LONG, LONG.encode(), list(range(10_000)), {"k": LONG}, "\x00" * 99]
)
def test_shorten_shows_at_most_80_characters(value: object) -> None:
    shown = shorten(value)
    assert len(shown) <= SHOWN
    assert shown.endswith("…")


def test_shorten_keeps_short_values_whole() -> None:
    assert shorten("abc") == "'abc'"
    assert shorten(1e300) == "1e+300"


def test_shorten_survives_a_repr_that_raises() -> None:
    class Bad:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert shorten(Bad()) == "<Bad>"


# -- text ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "non-empty"),
        (None, "non-empty"),
        (7, "non-empty"),
        ("a\x00b", "control"),
        ("a\ud800b", "unprintable"),
        ("a\nb", "control"),
        ("a\x7fb", "control"),
        ("y" * 1001, "at most 1000"),
    ],
)
def test_text_refuses_empty_unprintable_and_long_values(value: object, reason: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"^subject .*{reason}"):
        check_text(value, "subject", max_length=1000)


def test_text_accepts_spaces_and_any_script_unless_told() -> None:
    assert check_text("reçu n° 7 — 東京", "subject", max_length=100) == "reçu n° 7 — 東京"
    with pytest.raises(InvalidArgumentError, match="whitespace"):
        check_text("a b", "type", max_length=100, spaces=False)
    assert check_text(None, "subject", max_length=10, optional=True) is None


@pytest.mark.parametrize("name", ["send", "billing.send_invoice", "t.<locals>.f", "envoi_reçu"])
def test_labels_take_python_qualified_names(name: str) -> None:
    assert check_label(name, "task name") == name


@pytest.mark.parametrize("name", ["", "a b", "a\tb", "x" * 201, "a\x00", "\ud800"])
def test_labels_refuse_spaces_controls_and_long_names(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^job name "):
        check_label(name, "job name")


def test_identifiers_queues_and_topics_follow_their_grammar() -> None:
    assert check_identifier("orders.audit:v2", "subscription name") == "orders.audit:v2"
    assert check_queue("emails-1.hi") == "emails-1.hi"
    assert check_topic("orders_2") == "orders_2"
    for bad in ("a b", "é", "", "x" * 201, "a\x00"):
        with pytest.raises(InvalidArgumentError):
            check_identifier(bad, "subscription name")
    for bad in ("a:b", "x" * 101, "a b"):
        with pytest.raises(InvalidArgumentError, match="queue name"):
            check_queue(bad)
    for bad in ("_x", ".x", "a:b", "x" * 201):
        with pytest.raises(InvalidArgumentError, match="topic name"):
            check_topic(bad)


def test_reserved_topics_are_readable_but_not_publishable() -> None:
    assert check_topic("cronbus.runs") == "cronbus.runs"
    with pytest.raises(InvalidArgumentError, match="written by cronbus alone"):
        check_topic("cronbus.runs", publish=True)
    assert check_topic("cronbusy", publish=True) == "cronbusy"


def test_keys_allow_500_characters() -> None:
    assert check_key("k" * 500, "event key") == "k" * 500
    assert check_key(None, "event key") is None
    with pytest.raises(InvalidArgumentError, match=r"at most 500 characters \(it has 100000\)"):
        check_key(LONG, "event key")


# -- CloudEvents attributes ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "source",
    [
        "cronbus",
        "cronbus/worker",
        "/orders",
        "https://example.com/a/b?x=1#frag",
        "urn:shop:orders",
        "mailto:a@example.com",
        "//host:8080/p",
        "http://[::1]/x",
        "a%20b",
        "./rel/path",
    ],
)
def test_sources_are_uri_references(source: str) -> None:
    assert check_uri_reference(source, "event source") == source


@pytest.mark.parametrize(
    "source", ["", "a b", "1a:b", "a%zz", "ö", "http://x/\x00", "a#b#c", "http://[::1", "x" * 1001]
)
def test_sources_that_are_not_uri_references_are_refused(source: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^event source "):
        check_uri_reference(source, "event source")


def test_types_and_ids() -> None:
    assert check_event_type("com.example.order.created") == "com.example.order.created"
    for bad in ("order created", "", "t" * 5000, "a\x00"):
        with pytest.raises(InvalidArgumentError, match=r"^event type "):
            check_event_type(bad)
    assert check_event_id("run-1-2-run.dead") == "run-1-2-run.dead"
    for bad in ("a b", "é", "", "i" * 201):
        with pytest.raises(InvalidArgumentError, match="visible ASCII"):
            check_event_id(bad)


# -- numbers and times ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", [1e300, -1.0, math.nan, math.inf, "soon", True, 3.2e9 * 2])
def test_seconds_are_finite_not_negative_and_at_most_100_years(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^delay "):
        check_seconds(value, "delay")


def test_seconds_accept_the_bounds() -> None:
    assert check_seconds(0, "delay") == 0.0
    assert check_seconds(100 * 365 * 86_400, "delay") == 100 * 365 * 86_400
    with pytest.raises(InvalidArgumentError, match="more than zero"):
        check_seconds(0, "timeout", positive=True)


@pytest.mark.parametrize(
    "value",
    [
        1e300,
        -1,
        math.nan,
        MAX_TIME + 1,
        datetime(2024, 1, 1),
        datetime(1969, 12, 31, tzinfo=UTC),
        datetime.max.replace(tzinfo=timezone(-timedelta(hours=23))),
        "2024-01-01",
    ],
)
def test_times_lie_between_1970_and_9999(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^eta "):
        check_time(value, "eta")


def test_times_accept_epoch_seconds_and_aware_datetimes() -> None:
    now = time.time()
    assert check_time(now, "eta") == now
    assert check_time(datetime(9999, 12, 31, 23, 59, tzinfo=UTC), "eta") < MAX_TIME
    assert check_time(0, "eta") == 0.0


def test_priorities_are_bounded_whole_numbers() -> None:
    assert check_priority(-1_000_000) == -1_000_000
    for bad in (1_000_001, 1.5, True, 10**30):
        with pytest.raises(InvalidArgumentError, match="priority"):
            check_priority(bad)


# -- JSON ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({1: 2, None: 4}, "dict key must be a string, not int"),
        ({"a": [{"b": {None: 1}}]}, r"at \['a'\]\[0\]\['b'\]: a dict key must be a string"),
        (["\ud800"], r"at \[0\]: a string holds a lone surrogate"),
        ({"k\x00": 1}, "NUL character"),
        ({"a": math.nan}, "NaN"),
        ({1, 2}, "set cannot be encoded"),
        ([b"x"], "bytes cannot be encoded"),
    ],
)
def test_json_refuses_what_json_would_change_or_no_store_keeps(value: object, reason: str) -> None:
    with pytest.raises(SerializationError, match=reason):
        encode_value(value, "the data")


def test_json_refuses_deep_nesting_and_cycles_without_recursing_forever() -> None:
    deep: list[object] = []
    for _ in range(1000):
        deep = [deep]
    with pytest.raises(SerializationError, match="nest more than 100"):
        check_json(deep, "the data")
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(SerializationError, match="nest more than 100"):
        check_json(cycle, "the data")


def test_json_keeps_what_it_accepts() -> None:
    value = {"a": [1, 2.5, None, True, "x\ny", {"b": "東京"}], "": ()}
    assert encode_value(value, "the data") == '{"a":[1,2.5,null,true,"x\\ny",{"b":"東京"}],"":[]}'


def test_a_200_mb_argument_is_refused_before_it_is_copied() -> None:
    huge = "x" * 200_000_000
    started = time.perf_counter()
    with pytest.raises(InvalidArgumentError, match="over the limit of 1,048,576 bytes"):
        encode_call(None, "t", [huge], {}, max_bytes=1 << 20)
    assert time.perf_counter() - started < 0.5


def test_the_limit_counts_every_argument_together_and_in_utf8_bytes() -> None:
    encode_call(None, "t", ["a" * 400], {"b": "c" * 400}, max_bytes=1000)
    with pytest.raises(InvalidArgumentError, match="the arguments of task 't'"):
        encode_call(None, "t", ["a" * 600], {"b": "c" * 600}, max_bytes=1000)
    with pytest.raises(InvalidArgumentError, match="over the limit"):
        encode_value("é" * 600, "the data", max_bytes=1000)  # 600 characters, 1,202 bytes


def test_keyword_names_are_checked_too() -> None:
    with pytest.raises(SerializationError, match="NUL"):
        encode_call(None, "t", [], {"a\x00": 1})


def test_parse_json_refuses_constants_and_deep_nesting() -> None:
    assert parse_json('{"a": [1]}', "--kwargs") == {"a": [1]}
    for text in ("NaN", "[Infinity]", "{", "[" * 100_000):
        with pytest.raises(SerializationError, match=r"^--data"):
            parse_json(text, "--data")


def test_json_errors_show_at_most_80_characters_of_the_value() -> None:
    with pytest.raises(SerializationError) as info:
        encode_value({"k": LONG + "\x00"}, "the data")
    message = str(info.value)
    assert len(message) < 300
    assert "x" * 81 not in message


# -- settings ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("LEASE_SECONDS", "abc", "CRONBUS_LEASE_SECONDS: expected a number of seconds, got 'abc'"),
        ("LEASE_SECONDS", "nan", "CRONBUS_LEASE_SECONDS: expected a number of seconds, got nan"),
        ("LEASE_SECONDS", "-1", "CRONBUS_LEASE_SECONDS: expected more than zero seconds, got -1.0"),
        ("LEASE_SECONDS", "1e308", "CRONBUS_LEASE_SECONDS: expected at most 31536000 seconds"),
        ("GRACE_SECONDS", "x", "CRONBUS_GRACE_SECONDS: expected a number of seconds, got 'x'"),
        ("CONCURRENCY", "1.5", "CRONBUS_CONCURRENCY: expected a whole number, got '1.5'"),
        ("CONCURRENCY", "0", "CRONBUS_CONCURRENCY: expected a whole number from 1 to 10000"),
        ("HEARTBEAT_FRACTION", "0.9", "CRONBUS_HEARTBEAT_FRACTION: expected a fraction"),
        ("MAX_PAYLOAD_BYTES", "1MB", "CRONBUS_MAX_PAYLOAD_BYTES: expected a whole number"),
        ("LOG_LIMIT", "z" * 1000, "CRONBUS_LOG_LIMIT: expected a whole number, got 'zzz"),
    ],
)
def test_bad_settings_name_the_variable(variable: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.load({f"CRONBUS_{variable}": raw})
    assert str(info.value).startswith(message)
    assert len(_shown(str(info.value))) <= SHOWN


def test_settings_take_the_payload_limit_from_the_environment() -> None:
    assert Settings.load({}).max_payload_bytes == 1 << 20
    assert Settings.load({"CRONBUS_MAX_PAYLOAD_BYTES": "2048"}).max_payload_bytes == 2048
    with pytest.raises(ConfigurationError, match=r"^lease_seconds: "):
        Settings(lease_seconds=math.inf)


def test_every_error_is_a_cronbus_error() -> None:
    for error in (InvalidArgumentError, SerializationError, ConfigurationError):
        assert issubclass(error, CronbusError)
