"""Events: built and checked at the edge, immutable, and faithful through CloudEvents JSON."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronbus.errors import InvalidArgumentError, SerializationError
from cronbus.events import Event, make_event, new_event_id, validate_topic
from cronbus.events.event import format_time, parse_time

T0 = 1_714_564_800.0  # 2024-05-01T12:00:00Z

# -- make_event -----------------------------------------------------------------------------------


def test_defaults() -> None:
    before = time.time()
    event = make_event("order.created", {"id": 7})
    assert event.type == "order.created"
    assert event.data == {"id": 7}
    assert event.source == "cronbus"
    assert event.specversion == "1.0"
    assert event.datacontenttype == "application/json"
    assert before <= event.time <= time.time()
    assert (event.subject, event.key, event.dataschema) == (None, None, None)
    assert (event.topic, event.offset, event.published_at) == (None, None, None)
    assert event.extensions == {}


def test_default_ids_are_uuid7_in_creation_order() -> None:
    first = new_event_id()
    time.sleep(0.002)
    second = make_event("t").id
    assert uuid.UUID(first).version == 7
    assert uuid.UUID(second).version == 7
    assert uuid.UUID(first).variant == uuid.RFC_4122
    assert first < second


def test_default_ids_are_unique() -> None:
    assert len({new_event_id() for _ in range(2000)}) == 2000


def test_every_attribute_can_be_given() -> None:
    event = make_event(
        "order.paid",
        [1, "two"],
        source="shop/eu",
        subject="orders/7",
        id="evt-7",
        key="customer-3",
        time=T0,
        datacontenttype="application/vnd.shop+json",
        dataschema="https://example.com/order.json",
        extensions={"traceparent": "00-abc-def-01", "priority": 3, "urgent": False},
    )
    assert (event.source, event.subject, event.id, event.key) == (
        "shop/eu",
        "orders/7",
        "evt-7",
        "customer-3",
    )
    assert event.time == T0
    assert event.datacontenttype == "application/vnd.shop+json"
    assert event.dataschema == "https://example.com/order.json"
    assert event.extensions == {"traceparent": "00-abc-def-01", "priority": 3, "urgent": False}


def test_time_accepts_an_aware_datetime() -> None:
    paris = timezone(timedelta(hours=2))
    event = make_event("t", time=datetime(2024, 5, 1, 14, 0, tzinfo=paris))
    assert event.time == T0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"type": ""}, "event type must be a non-empty string"),
        ({"type": None}, "event type must be a non-empty string"),
        ({"source": ""}, "event source must be a non-empty string"),
        ({"subject": ""}, "event subject must be a non-empty string"),
        ({"key": ""}, "event key must be a non-empty string"),
        ({"id": ""}, "event id must be 1 to 200 visible ASCII"),
        ({"id": "has space"}, "event id must be 1 to 200 visible ASCII"),
        ({"id": "line\nbreak"}, "event id must be 1 to 200 visible ASCII"),
        ({"id": "é"}, "event id must be 1 to 200 visible ASCII"),
        ({"id": "x" * 201}, "event id must be 1 to 200 visible ASCII"),
        ({"time": datetime(2024, 5, 1)}, "aware datetime"),
        ({"time": float("nan")}, "epoch seconds or an aware datetime"),
        ({"time": "2024-05-01"}, "epoch seconds or an aware datetime"),
        ({"time": True}, "epoch seconds or an aware datetime"),
        ({"extensions": {"Trace": "x"}}, "lower-case letters and digits"),
        ({"extensions": {"trace_id": "x"}}, "lower-case letters and digits"),
        ({"extensions": {"topic": "x"}}, "'topic' is a CloudEvent attribute"),
        ({"extensions": {"subject": "x"}}, "'subject' is a CloudEvent attribute"),
        ({"extensions": {"score": 1.5}}, "must be a string, integer or boolean, not float"),
    ],
)
def test_bad_attributes_are_refused(kwargs: dict[str, Any], fragment: str) -> None:
    arguments: dict[str, Any] = {"type": "t", **kwargs}
    with pytest.raises(InvalidArgumentError) as caught:
        make_event(**arguments)
    assert fragment in str(caught.value)


def test_the_longest_id_is_accepted() -> None:
    assert make_event("t", id="x" * 200).id == "x" * 200


def test_data_must_be_json() -> None:
    with pytest.raises(SerializationError, match=r"the data of event type 'order\.created'") as c:
        make_event("order.created", {"when": datetime.now(UTC)})
    assert "datetime cannot be encoded" in str(c.value)
    with pytest.raises(SerializationError, match="NaN"):
        make_event("t", [float("nan")])


def test_events_are_frozen_and_keyword_only() -> None:
    event = make_event("t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.type = "u"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Event("id", "src", "t", 1.0)  # type: ignore[misc]


def test_appended_sets_the_position_and_keeps_the_rest() -> None:
    event = make_event("t", {"a": 1}, id="e1", time=T0)
    stored = event.appended(topic="orders", offset=41, published_at=T0 + 1)
    assert (stored.topic, stored.offset, stored.published_at) == ("orders", 41, T0 + 1)
    assert dataclasses.replace(stored, topic=None, offset=None, published_at=None) == event
    assert event.topic is None  # the original is unchanged
    with pytest.raises(InvalidArgumentError, match="invalid topic name"):
        event.appended(topic="no spaces", offset=0, published_at=T0)


# -- topic names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["orders", "a", "Orders.EU_2-x", "0", "a" * 200])
def test_valid_topic_names(name: str) -> None:
    assert validate_topic(name) == name


@pytest.mark.parametrize("name", ["", "-orders", ".x", "_x", "a b", "a/b", "ü", "a" * 201, None])
def test_invalid_topic_names(name: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="use 1 to 200 letters, digits"):
        validate_topic(name)


# -- CloudEvents JSON -----------------------------------------------------------------------------


def test_to_cloudevent_is_the_structured_json_form() -> None:
    event = make_event(
        "order.created",
        {"id": 7},
        source="shop",
        subject="orders/7",
        id="e1",
        key="c3",
        time=T0 + 0.25,
        extensions={"traceparent": "tp"},
    ).appended(topic="orders", offset=5, published_at=T0 + 1)
    assert event.to_cloudevent() == {
        "specversion": "1.0",
        "id": "e1",
        "source": "shop",
        "type": "order.created",
        "subject": "orders/7",
        "time": "2024-05-01T12:00:00.25Z",
        "datacontenttype": "application/json",
        "traceparent": "tp",
        "topic": "orders",
        "offset": 5,
        "partitionkey": "c3",
        "publishedat": "2024-05-01T12:00:01Z",
        "data": {"id": 7},
    }


def test_to_cloudevent_leaves_out_what_is_absent() -> None:
    doc = make_event("t", id="e1", time=T0).to_cloudevent()
    assert doc == {
        "specversion": "1.0",
        "id": "e1",
        "source": "cronbus",
        "type": "t",
        "time": "2024-05-01T12:00:00Z",
        "datacontenttype": "application/json",
    }


def test_falsy_data_and_extensions_are_kept() -> None:
    doc = make_event("t", 0, extensions={"flag": False}).to_cloudevent()
    assert doc["data"] == 0
    assert doc["flag"] is False


def test_from_cloudevent_reads_a_foreign_event() -> None:
    event = Event.from_cloudevent(
        {
            "specversion": "1.0",
            "id": "A234-1234-1234",
            "source": "https://github.com/cloudevents/spec/pull",
            "type": "com.github.pull_request.opened",
            "subject": "123",
            "time": "2018-04-05T17:31:00+02:00",
            "comexampleextension1": "value",
            "comexampleothervalue": 5,
            "datacontenttype": "text/xml",
            "data": '<much wow="xml"/>',
        }
    )
    assert event.id == "A234-1234-1234"
    assert event.type == "com.github.pull_request.opened"
    assert event.time == datetime(2018, 4, 5, 15, 31, tzinfo=UTC).timestamp()
    assert event.datacontenttype == "text/xml"
    assert event.data == '<much wow="xml"/>'
    assert event.extensions == {"comexampleextension1": "value", "comexampleothervalue": 5}
    assert event.topic is None


def test_from_cloudevent_without_time_takes_now() -> None:
    doc = {"specversion": "1.0", "id": "e", "source": "s", "type": "t"}
    assert Event.from_cloudevent(doc, now=T0).time == T0
    before = time.time()
    assert Event.from_cloudevent(doc).time >= before


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"specversion": "0.3"}, "specversion must be '1.0', got '0.3'"),
        ({"specversion": None}, "specversion must be '1.0', got None"),
        ({"id": None}, "CloudEvent id must be a non-empty string"),
        ({"source": ""}, "CloudEvent source must be a non-empty string"),
        ({"type": 5}, "CloudEvent type must be a non-empty string"),
        ({"subject": 5}, "CloudEvent subject must be a non-empty string"),
        ({"time": "yesterday"}, "CloudEvent time: 'yesterday' is not an RFC 3339 timestamp"),
        ({"time": "2024-13-01T00:00:00Z"}, "is not a valid time"),
        ({"data_base64": "AAAA"}, "data_base64 is not supported"),
        ({"id": "has space"}, "event id must be 1 to 200 visible ASCII"),
        ({"Bad-Name": 1}, "extension name 'Bad-Name'"),
        ({"topic": "orders"}, "offset must be a non-negative integer, not None"),
        ({"topic": "orders", "offset": -1}, "offset must be a non-negative integer, not -1"),
        ({"topic": "orders", "offset": True}, "offset must be a non-negative integer"),
        ({"topic": "bad topic", "offset": 1}, "invalid topic name 'bad topic'"),
        ({"offset": 1}, "invalid topic name None"),
        ({"topic": "o", "offset": 1, "publishedat": "now"}, "CloudEvent publishedat:"),
    ],
)
def test_from_cloudevent_refuses_bad_documents(change: dict[str, Any], fragment: str) -> None:
    doc = {"specversion": "1.0", "id": "e", "source": "s", "type": "t", **change}
    with pytest.raises(InvalidArgumentError) as caught:
        Event.from_cloudevent(doc)
    assert fragment in str(caught.value)


def test_from_cloudevent_refuses_what_is_not_an_object() -> None:
    with pytest.raises(InvalidArgumentError, match="a CloudEvent is a JSON object, not list"):
        Event.from_cloudevent([])  # type: ignore[arg-type]


# What cronbus accepts: text without NUL and lone surrogates; attributes printable.
json_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
printable = st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Cn", "Co", "Zl", "Zp"))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_text.filter(lambda t: len(t) <= 8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(json_text.filter(lambda t: len(t) <= 5), inner, max_size=3)
    ),
    max_leaves=10,
)
names = st.text(printable, min_size=1, max_size=12).filter(
    lambda t: t.isprintable() and t.strip() == t
)
types = st.from_regex(r"[a-z][a-z0-9.-]{0,11}", fullmatch=True)
sources = st.from_regex(r"(urn:[a-z]{1,5}:[a-z0-9]{1,6}|/[a-z0-9/._~-]{0,10})", fullmatch=True)
# Microsecond times: what RFC 3339 text carries through the JSON form.
times = st.integers(0, 4_102_444_800 * 10**6).map(lambda us: us / 10**6)
events = st.builds(
    make_event,
    types,
    json_values,
    source=sources,
    subject=st.none() | names,
    id=st.none() | st.from_regex(r"[\x21-\x7e]{1,20}", fullmatch=True),
    key=st.none() | names,
    time=times,
    extensions=st.dictionaries(
        st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True).filter(lambda n: n not in _reserved()),
        names.filter(lambda t: len(t) <= 5) | st.integers() | st.booleans(),
        max_size=3,
    ),
)


def _reserved() -> set[str]:
    return {"id", "source", "type", "subject", "time", "data", "topic", "offset"}


@given(events, st.booleans(), st.integers(0, 2**62), times)
def test_cloudevent_json_round_trip(
    event: Event, appended: bool, offset: int, published_at: float
) -> None:
    if appended:
        event = event.appended(topic="t.1", offset=offset, published_at=published_at)
    wire = json.loads(json.dumps(event.to_cloudevent()))
    assert Event.from_cloudevent(wire) == event


# -- RFC 3339 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2024-05-01T12:00:00Z", T0),
        ("2024-05-01t12:00:00z", T0),
        ("2024-05-01T14:00:00+02:00", T0),
        ("2024-05-01T11:30:00-00:30", T0),
        ("2024-05-01T12:00:00.5Z", T0 + 0.5),
        ("2024-05-01T12:00:00.123456789Z", T0 + 0.123456),
    ],
)
def test_parse_time(text: str, epoch: float) -> None:
    assert parse_time(text) == pytest.approx(epoch, abs=1e-7)


@pytest.mark.parametrize(
    "text",
    ["2024-05-01", "2024-05-01T12:00:00", "2024-05-01 12:00:00Z", "2024-05-01T12:00Z", "", "x"],
)
def test_parse_time_refuses_what_is_not_rfc3339(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not an RFC 3339 timestamp"):
        parse_time(text)


def test_format_time() -> None:
    assert format_time(T0) == "2024-05-01T12:00:00Z"
    assert format_time(T0 + 0.000001) == "2024-05-01T12:00:00.000001Z"
    assert format_time(0) == "1970-01-01T00:00:00Z"


@given(times)
def test_time_text_round_trip(epoch: float) -> None:
    assert parse_time(format_time(epoch)) == epoch
