"""Webhook signatures, checked against the independent `standardwebhooks` implementation."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError as TheirError

from cronbus.errors import CronbusError, InvalidArgumentError, WebhookVerificationError
from cronbus.events import generate_secret, make_event, sign, webhook_headers
from cronbus.events.signing import decode_secret
from cronbus.serialization import dumps
from cronbus.webhooks import verify

# The example of the Standard Webhooks specification (and of Svix, where it comes from).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

OLD, NEW = generate_secret(), generate_secret()


def cloudevent_body() -> bytes:
    event = make_event("order.created", {"id": 7, "total": 12.5, "note": "café"}, id="evt-1")
    return dumps(event.to_cloudevent()).encode()


def signed(body: bytes, secrets: Any = OLD, at: float | None = None) -> dict[str, str]:
    return webhook_headers(secrets, "evt-1", time.time() if at is None else at, body)


# -- secrets --------------------------------------------------------------------------------------


def test_generated_secrets_are_whsec_base64_of_random_bytes() -> None:
    secret = generate_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert len(decode_secret(generate_secret(64))) == 64
    assert generate_secret() != generate_secret()


@pytest.mark.parametrize("size", [0, 23, 65])
def test_generated_secrets_have_a_sane_size(size: int) -> None:
    with pytest.raises(InvalidArgumentError, match="24 to 64 bytes"):
        generate_secret(size)


def test_unpadded_secrets_are_accepted() -> None:
    key = bytes(range(25))
    unpadded = "whsec_" + base64.b64encode(key).decode().rstrip("=")
    assert decode_secret(unpadded) == key


@pytest.mark.parametrize(
    ("secret", "fragment"),
    [
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "a webhook secret starts with 'whsec_'"),
        ("whsec_not*base64!", "not valid base64 after 'whsec_'"),
        ("whsec_" + base64.b64encode(b"short").decode(), "holds 24 to 64 bytes, this one 5"),
        ("whsec_", "holds 24 to 64 bytes, this one 0"),
        ("whsec_" + base64.b64encode(bytes(65)).decode(), "this one 65"),
    ],
)
def test_malformed_secrets_are_refused_when_signing_and_verifying(
    secret: str, fragment: str
) -> None:
    body = cloudevent_body()
    with pytest.raises(InvalidArgumentError) as signing:
        sign(secret, "evt-1", time.time(), body)
    with pytest.raises(InvalidArgumentError) as verifying:
        verify(body, signed(body), secret)
    assert fragment in str(signing.value)
    assert fragment in str(verifying.value)
    assert "generate_secret()" in str(verifying.value)


def test_no_secret_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one webhook secret is required"):
        sign([], "evt-1", 0, b"{}")
    with pytest.raises(InvalidArgumentError, match="at least one webhook secret is required"):
        verify(b"{}", signed(b"{}"), [])


# -- signing --------------------------------------------------------------------------------------


def test_the_specification_example() -> None:
    assert sign(SPEC_SECRET, SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY) == SPEC_SIGNATURE
    headers = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }
    assert verify(SPEC_BODY, headers, SPEC_SECRET, now=SPEC_TIMESTAMP) == {"test": 2432232314}


def test_webhook_headers() -> None:
    headers = webhook_headers([OLD, NEW], "evt-1", 1_700_000_000.9, b"{}")
    assert headers == {
        "webhook-id": "evt-1",
        "webhook-timestamp": "1700000000",
        "webhook-signature": sign([OLD, NEW], "evt-1", 1_700_000_000, b"{}"),
    }


def test_one_signature_per_secret_separated_by_spaces() -> None:
    header = sign([OLD, NEW], "evt-1", 1_700_000_000, b"{}")
    entries = header.split(" ")
    assert len(entries) == 2
    assert entries[0] == sign(OLD, "evt-1", 1_700_000_000, b"{}")
    assert entries[1] == sign(NEW, "evt-1", 1_700_000_000, b"{}")
    assert all(e.startswith("v1,") and len(base64.b64decode(e[3:])) == 32 for e in entries)


def test_every_input_changes_the_signature() -> None:
    base = sign(OLD, "evt-1", 1_700_000_000, b"{}")
    assert sign(NEW, "evt-1", 1_700_000_000, b"{}") != base
    assert sign(OLD, "evt-2", 1_700_000_000, b"{}") != base
    assert sign(OLD, "evt-1", 1_700_000_001, b"{}") != base
    assert sign(OLD, "evt-1", 1_700_000_000, b"{ }") != base


@pytest.mark.parametrize(
    ("msg_id", "timestamp", "fragment"),
    [
        ("", 0, "message id is visible ASCII"),
        ("evt 1", 0, "message id is visible ASCII"),
        ("evt\r\nx-injected: 1", 0, "message id is visible ASCII"),
        ("evt-1", -1, "non-negative epoch seconds"),
        ("evt-1", float("inf"), "non-negative epoch seconds"),
        ("evt-1", True, "non-negative epoch seconds"),
        ("evt-1", "1700000000", "non-negative epoch seconds"),
    ],
)
def test_bad_message_ids_and_timestamps_are_refused(
    msg_id: str, timestamp: Any, fragment: str
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        webhook_headers(OLD, msg_id, timestamp, b"{}")
    assert fragment in str(caught.value)


# -- against standardwebhooks, both ways ----------------------------------------------------------


def test_our_signature_passes_their_verification() -> None:
    body = cloudevent_body()
    headers = signed(body)
    assert Webhook(OLD).verify(body, headers) == json.loads(body)
    with pytest.raises(TheirError):
        Webhook(NEW).verify(body, headers)


def test_our_rotation_header_passes_their_verification_with_either_secret() -> None:
    body = cloudevent_body()
    headers = signed(body, [OLD, NEW])
    assert Webhook(OLD).verify(body, headers) == json.loads(body)
    assert Webhook(NEW).verify(body, headers) == json.loads(body)
    with pytest.raises(TheirError):
        Webhook(generate_secret()).verify(body, headers)


def their_headers(secret: str, body: bytes, at: datetime) -> dict[str, str]:
    signature = Webhook(secret).sign("msg_1", at, body.decode())
    return {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


def test_their_signature_passes_our_verification() -> None:
    body = cloudevent_body()
    headers = their_headers(SPEC_SECRET, body, datetime.now(UTC))
    assert verify(body, headers, SPEC_SECRET) == json.loads(body)
    assert verify(body.decode(), headers, SPEC_SECRET) == json.loads(body)
    with pytest.raises(WebhookVerificationError, match="no signature"):
        verify(body, headers, NEW)


# -- verify ---------------------------------------------------------------------------------------


def test_verify_returns_the_cloudevent() -> None:
    body = cloudevent_body()
    payload = verify(body, signed(body), OLD)
    assert payload["id"] == "evt-1"
    assert payload["type"] == "order.created"
    assert payload["data"] == {"id": 7, "total": 12.5, "note": "café"}


def test_a_receiver_rotating_secrets_accepts_either() -> None:
    body = cloudevent_body()
    assert verify(body, signed(body, OLD), [OLD, NEW])["id"] == "evt-1"
    assert verify(body, signed(body, NEW), [OLD, NEW])["id"] == "evt-1"
    assert verify(body, signed(body, [OLD, NEW]), NEW)["id"] == "evt-1"
    with pytest.raises(WebhookVerificationError, match="no signature"):
        verify(body, signed(body, OLD), [NEW, generate_secret()])


@pytest.mark.parametrize(
    "tamper",
    [
        lambda b: b.replace(b'"id":7', b'"id":8'),
        lambda b: b + b" ",
        lambda b: json.dumps(json.loads(b)).encode(),  # re-encoded: same JSON, other bytes
    ],
)
def test_a_changed_body_is_refused(tamper: Any) -> None:
    body = cloudevent_body()
    headers = signed(body)
    changed = tamper(body)
    assert changed != body
    with pytest.raises(WebhookVerificationError, match="pass the raw body"):
        verify(changed, headers, OLD)


@pytest.mark.parametrize("header", ["webhook-id", "webhook-timestamp"])
def test_changed_id_or_timestamp_is_refused(header: str) -> None:
    body = cloudevent_body()
    now = time.time()
    headers = signed(body, at=now)
    headers[header] = "evt-2" if header == "webhook-id" else str(int(now) - 1)
    with pytest.raises(WebhookVerificationError, match="no signature"):
        verify(body, headers, OLD)


def test_the_timestamp_tolerance() -> None:
    body = cloudevent_body()
    headers = signed(body, at=1_700_000_000)
    assert verify(body, headers, OLD, now=1_700_000_300)["id"] == "evt-1"
    assert verify(body, headers, OLD, now=1_699_999_700)["id"] == "evt-1"
    with pytest.raises(WebhookVerificationError, match="301 s old, more than the 300 s"):
        verify(body, headers, OLD, now=1_700_000_301)
    with pytest.raises(WebhookVerificationError, match="301 s in the future"):
        verify(body, headers, OLD, now=1_699_999_699)
    assert verify(body, headers, OLD, tolerance=3600, now=1_700_003_600)["id"] == "evt-1"
    with pytest.raises(WebhookVerificationError, match="61 s old, more than the 60 s"):
        verify(body, headers, OLD, tolerance=60, now=1_700_000_061)


def test_a_stale_webhook_is_refused_even_with_a_valid_signature() -> None:
    body = cloudevent_body()
    headers = signed(body, at=time.time() - 3600)
    with pytest.raises(WebhookVerificationError, match="s old"):
        verify(body, headers, OLD)


@pytest.mark.parametrize("tolerance", [-1, float("nan")])
def test_a_bad_tolerance_is_refused(tolerance: float) -> None:
    body = cloudevent_body()
    with pytest.raises(InvalidArgumentError, match="tolerance"):
        verify(body, signed(body), OLD, tolerance=tolerance)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_named(missing: str) -> None:
    body = cloudevent_body()
    headers = signed(body)
    del headers[missing]
    with pytest.raises(WebhookVerificationError, match=f"missing header {missing}"):
        verify(body, headers, OLD)
    headers[missing] = ""
    with pytest.raises(WebhookVerificationError, match=f"missing header {missing}"):
        verify(body, headers, OLD)


@pytest.mark.parametrize("value", ["1700000000.5", "-5", "soon", "1e9", " 1700000000"])
def test_a_malformed_timestamp_is_refused(value: str) -> None:
    body = cloudevent_body()
    headers = {**signed(body), "webhook-timestamp": value}
    with pytest.raises(WebhookVerificationError, match="must be whole epoch seconds"):
        verify(body, headers, OLD)


@pytest.mark.parametrize("value", ["v2,abc", "v1a,abc", "v1", "garbage", "v1,not*base64"])
def test_a_header_without_a_readable_v1_signature_is_refused(value: str) -> None:
    body = cloudevent_body()
    headers = {**signed(body), "webhook-signature": value}
    with pytest.raises(WebhookVerificationError, match="holds no v1 signature"):
        verify(body, headers, OLD)


def test_unknown_signature_versions_are_skipped() -> None:
    body = cloudevent_body()
    headers = signed(body)
    headers["webhook-signature"] = "v2,abcd v1,not*base64 " + headers["webhook-signature"]
    assert verify(body, headers, OLD)["id"] == "evt-1"


class Headers(Mapping[str, str]):
    """Like Starlette's headers: case-insensitive lookup, lower-case names when iterated."""

    def __init__(self, raw: dict[str, str]) -> None:
        self._raw = {k.lower(): v for k, v in raw.items()}

    def __getitem__(self, name: str) -> str:
        return self._raw[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def test_header_names_are_case_insensitive() -> None:
    body = cloudevent_body()
    headers = signed(body)
    title = {k.title(): v for k, v in headers.items()}
    upper = {k.upper(): v for k, v in headers.items()}
    assert set(title) == {"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}
    assert verify(body, title, OLD)["id"] == "evt-1"
    assert verify(body, upper, OLD)["id"] == "evt-1"
    assert verify(body, Headers(title), OLD)["id"] == "evt-1"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not json", "the signed body is not JSON"),
        (b"\xff\xfe", "the signed body is not JSON"),
        (b"[1, 2]", "the signed body is a JSON list, not an object"),
    ],
)
def test_an_authentic_body_that_is_not_a_json_object_is_refused(body: bytes, fragment: str) -> None:
    with pytest.raises(WebhookVerificationError) as caught:
        verify(body, signed(body), OLD)
    assert fragment in str(caught.value)


def test_the_error_belongs_to_cronbus() -> None:
    assert issubclass(WebhookVerificationError, CronbusError)
    assert str(WebhookVerificationError()) == (
        "The webhook is refused: a header is missing, it is too old, or no signature matches."
    )
