"""Verifying the webhooks cronbus sends, in the services that receive them.

::

    from cronbus.webhooks import WebhookVerificationError, verify

    try:
        event = verify(await request.body(), request.headers, secrets=["whsec_..."])
    except WebhookVerificationError:
        return Response(status_code=401)

:func:`verify` follows the Standard Webhooks specification, so it also checks webhooks from
other senders that follow it, as long as their body is a JSON object.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidArgumentError, WebhookVerificationError
from .events.signing import (
    HEADER_ID,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    decode_secrets,
    digest,
    signed_content,
)

__all__ = ["WebhookVerificationError", "verify"]

_TIMESTAMP = re.compile(r"[0-9]{1,15}")


def verify(
    body: bytes | str,
    headers: Mapping[str, str],
    secrets: str | Sequence[str],
    *,
    tolerance: float = 300,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a webhook's signature and age, and return its JSON body.

    ``body`` is the request body exactly as received. ``headers`` is any mapping (a plain dict
    or a framework's headers); names are matched case-insensitively. The webhook passes when
    any of its ``v1`` signatures matches any of ``secrets`` (several during a rotation) and its
    timestamp is within ``tolerance`` seconds of ``now`` (default: the current time), which
    stops replays of old deliveries.

    Raises :class:`~cronbus.errors.WebhookVerificationError` saying why a webhook is refused,
    and :class:`~cronbus.errors.InvalidArgumentError` when a secret is malformed (a mistake on
    the receiver's side, not the sender's).
    """
    keys = decode_secrets(secrets)
    if not math.isfinite(tolerance) or tolerance < 0:
        raise InvalidArgumentError(
            f"tolerance is a non-negative number of seconds, not {tolerance}"
        )
    raw = body.encode() if isinstance(body, str) else bytes(body)
    msg_id = _header(headers, HEADER_ID)
    timestamp = _header(headers, HEADER_TIMESTAMP)
    _check_age(timestamp, tolerance, time.time() if now is None else now)
    offered = _signatures(_header(headers, HEADER_SIGNATURE))
    content = signed_content(msg_id, timestamp, raw)
    expected = [digest(key, content) for key in keys]
    # compare_digest takes the same time wherever the first differing byte is.
    if not any(hmac.compare_digest(e, o) for e in expected for o in offered):
        raise WebhookVerificationError(
            "no signature in webhook-signature matches the secrets (wrong secret, or the body "
            "was changed; pass the raw body, not re-encoded JSON)"
        )
    return _payload(raw)


def _header(headers: Mapping[str, str], name: str) -> str:
    # Fast path for dicts with lower-case names and for case-insensitive header objects.
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    if not value:
        raise WebhookVerificationError(f"missing header {name}")
    return value


def _check_age(timestamp: str, tolerance: float, now: float) -> None:
    if not _TIMESTAMP.fullmatch(timestamp):
        raise WebhookVerificationError(
            f"webhook-timestamp must be whole epoch seconds, not {timestamp!r}"
        )
    age = now - int(timestamp)
    if age > tolerance:
        raise WebhookVerificationError(
            f"webhook-timestamp is {age:.0f} s old, more than the {tolerance:g} s tolerance"
        )
    if -age > tolerance:
        raise WebhookVerificationError(
            f"webhook-timestamp is {-age:.0f} s in the future, more than the {tolerance:g} s "
            "tolerance (check the clocks)"
        )


def _signatures(header: str) -> list[bytes]:
    """The ``v1`` signatures of the header; other versions and unreadable entries are skipped."""
    found = []
    for entry in header.split():
        version, comma, encoded = entry.partition(",")
        if version != "v1" or not comma:
            continue
        try:
            found.append(base64.b64decode(encoded, validate=True))
        except binascii.Error:
            continue
    if not found:
        raise WebhookVerificationError("webhook-signature holds no v1 signature")
    return found


def _payload(raw: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WebhookVerificationError(f"the signed body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise WebhookVerificationError(
            f"the signed body is a JSON {type(payload).__name__}, not an object"
        )
    return payload
