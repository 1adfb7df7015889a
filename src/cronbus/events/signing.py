"""Standard Webhooks signatures: the three headers cronbus puts on every webhook it sends.

As https://www.standardwebhooks.com defines them: ``webhook-id`` (the message id, the same on
every retry), ``webhook-timestamp`` (integer epoch seconds) and ``webhook-signature``, which holds
``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` once per secret, separated by spaces, so a
receiver keeps accepting webhooks while it rotates from an old secret to a new one. A secret is
``whsec_`` followed by the base64 of 24 to 64 random bytes (:func:`generate_secret`).

Receivers check these headers with :func:`cronbus.webhooks.verify`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import re
from collections.abc import Sequence
from secrets import token_bytes

from ..errors import InvalidArgumentError

SECRET_PREFIX = "whsec_"
HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"

_MIN_KEY, _MAX_KEY = 24, 64  # bytes, as the specification recommends
# The id is sent as an HTTP header and sits before the first '.' of the signed content:
# visible ASCII keeps it a valid header value.
_MESSAGE_ID = re.compile(r"[\x21-\x7e]+")


def generate_secret(size: int = 32) -> str:
    """A new random secret, ``whsec_`` followed by the base64 of ``size`` bytes (24 to 64)."""
    if not _MIN_KEY <= size <= _MAX_KEY:
        raise InvalidArgumentError(
            f"a webhook secret has {_MIN_KEY} to {_MAX_KEY} bytes, not {size}"
        )
    return SECRET_PREFIX + base64.b64encode(token_bytes(size)).decode("ascii")


def decode_secret(secret: str) -> bytes:
    """The HMAC key inside a ``whsec_`` secret; ``InvalidArgumentError`` if it is malformed."""
    hint = f"generate one with cronbus.events.generate_secret() ({SECRET_PREFIX}<base64>)"
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise InvalidArgumentError(f"a webhook secret starts with {SECRET_PREFIX!r}; {hint}")
    text = secret[len(SECRET_PREFIX) :]
    try:
        # Padding is optional in the wild; validate=True still refuses any stray character.
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        raise InvalidArgumentError(
            f"a webhook secret is not valid base64 after {SECRET_PREFIX!r}; {hint}"
        ) from None
    if not _MIN_KEY <= len(key) <= _MAX_KEY:
        raise InvalidArgumentError(
            f"a webhook secret holds {_MIN_KEY} to {_MAX_KEY} bytes, this one {len(key)}; {hint}"
        )
    return key


def decode_secrets(secrets: str | Sequence[str]) -> list[bytes]:
    """The keys of one secret or of several (during a rotation); at least one is required."""
    listed = [secrets] if isinstance(secrets, str) else list(secrets)
    if not listed:
        raise InvalidArgumentError("at least one webhook secret is required")
    return [decode_secret(secret) for secret in listed]


def signed_content(msg_id: str, timestamp: str, body: bytes) -> bytes:
    """What is signed: ``id.timestamp.body``, the timestamp as written in its header."""
    return f"{msg_id}.{timestamp}.".encode() + body


def digest(key: bytes, content: bytes) -> bytes:
    """The HMAC-SHA256 of ``content`` under ``key``."""
    return hmac.new(key, content, hashlib.sha256).digest()


def sign(secrets: str | Sequence[str], msg_id: str, timestamp: float, body: bytes) -> str:
    """The ``webhook-signature`` header value: one ``v1,<base64>`` per secret, space-separated.

    ``timestamp`` is epoch seconds; its whole seconds are signed, as the header carries them.
    """
    content = signed_content(_check_id(msg_id), _timestamp_text(timestamp), body)
    return " ".join(
        "v1," + base64.b64encode(digest(key, content)).decode("ascii")
        for key in decode_secrets(secrets)
    )


def webhook_headers(
    secrets: str | Sequence[str], msg_id: str, timestamp: float, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers for sending ``body`` as message ``msg_id``."""
    return {
        HEADER_ID: msg_id,
        HEADER_TIMESTAMP: _timestamp_text(timestamp),
        HEADER_SIGNATURE: sign(secrets, msg_id, timestamp, body),
    }


def _check_id(msg_id: str) -> str:
    if not isinstance(msg_id, str) or not _MESSAGE_ID.fullmatch(msg_id):
        raise InvalidArgumentError(
            f"a webhook message id is visible ASCII without spaces, not {msg_id!r}"
        )
    return msg_id


def _timestamp_text(timestamp: float) -> str:
    if (
        isinstance(timestamp, bool)
        or not isinstance(timestamp, int | float)
        or not math.isfinite(timestamp)
        or timestamp < 0
    ):
        raise InvalidArgumentError(
            f"a webhook timestamp is non-negative epoch seconds, not {timestamp!r}"
        )
    return str(math.floor(timestamp))
