"""Numeric options of store URLs (``busy_timeout``, ``statement_timeout``, ``pool_max`` ...),
read strictly and within bounds, with errors that name the option and never show a password.

Values are plain decimals (``30``, ``2.5``): no signs, exponents, ``nan``, ``inf``, underscores
or non-ASCII digits, which ``float()`` and ``int()`` would otherwise accept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import StoreURLError
from ..validation import shorten
from .presence import shown_url

_SECONDS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?", re.ASCII)
_WHOLE = re.compile(r"[0-9]{1,12}", re.ASCII)
_SHOWN = 80
_QUERY_PASSWORD = re.compile(r"(?i)((?:^|[?&])password=)[^&#]*")


def url_error(url: str, message: str) -> StoreURLError:
    """``store URL <url>: <message>``, the URL without its password (in the user part or the
    query) and cut to 80 characters."""
    shown = _QUERY_PASSWORD.sub(r"\1***", shown_url(url))
    return StoreURLError(f"store URL {shorten(shown, _SHOWN)}: {message}")


def url_seconds(
    url: str, options: Mapping[str, str], name: str, default: float, maximum: float
) -> float:
    """Option ``name`` as seconds from 0 to ``maximum`` (``default`` when absent)."""
    if name not in options:
        return default
    text = options[name].strip()
    value = float(text) if _SECONDS.fullmatch(text) else -1.0
    if not 0 <= value <= maximum:
        raise url_error(
            url, f"{name} must be seconds from 0 to {maximum:g}, got {shorten(options[name])}"
        )
    return value


def url_whole(
    url: str, options: Mapping[str, str], name: str, default: int, minimum: int, maximum: int
) -> int:
    """Option ``name`` as a whole number from ``minimum`` to ``maximum`` (``default`` when
    absent)."""
    if name not in options:
        return default
    text = options[name].strip()
    value = int(text) if _WHOLE.fullmatch(text) else minimum - 1
    if not minimum <= value <= maximum:
        raise url_error(
            url,
            f"{name} must be a whole number from {minimum} to {maximum}, "
            f"got {shorten(options[name])}",
        )
    return value
