"""Showing a subscription's target without its secrets.

A webhook target holds three kinds of secrets: signing secrets, header values (``Authorization:
Bearer …``) and what a URL carries (``https://user:password@host/…?token=…``). The stored row
keeps them as they are (the dispatcher sends them; encrypting the store is not cronbus's job
yet), so everything that *shows* a target goes through :func:`public_target`: the CLI's tables
and ``--json``, and the records' ``repr``. Logs name a webhook by :func:`host_label` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"


def mask_url(url: str) -> str:
    """The URL with its user info replaced by ``***`` and every query value by ``***``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname  # raises ValueError for a malformed host
    except ValueError:
        return MASK
    if host is None:
        return MASK
    netloc = _host_port(parts)
    if parts.username is not None or parts.password is not None:
        netloc = f"{MASK}@{netloc}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(name, MASK) for name, _ in pairs], safe="*")
    # The fragment never leaves the client, but may hold a token pasted by mistake.
    fragment = MASK if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def host_label(url: str) -> str:
    """``host:port`` of a URL (what logs name a webhook by), or ``?`` if it does not parse."""
    try:
        parts = urlsplit(url)
        if parts.hostname is None:
            return "?"
        return _host_port(parts)
    except ValueError:
        return "?"


def _host_port(parts: SplitResult) -> str:
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return host if port is None else f"{host}:{port}"


def short_url(url: str, width: int = 40) -> str:
    """A masked URL cut to ``width`` characters for tables: scheme dropped, host kept whole."""
    masked = mask_url(url)
    for scheme in ("https://", "http://"):
        if masked.startswith(scheme):
            masked = masked[len(scheme) :]
            break
    return masked if len(masked) <= width else masked[: width - 1] + "…"


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Header names with their values masked (any value may be a credential)."""
    return dict.fromkeys(headers, MASK)


def public_target(target: Mapping[str, Any]) -> dict[str, Any]:
    """A target as it may be shown: a webhook's URL and headers masked, its signing secrets
    replaced by their count. Other kinds hold no secrets and are returned as they are."""
    if target.get("kind") != "webhook":
        return dict(target)
    shown = {k: v for k, v in target.items() if k != "secrets"}
    shown["url"] = mask_url(str(target.get("url", "")))
    shown["headers"] = mask_headers(target.get("headers") or {})
    shown["secret_count"] = len(target.get("secrets") or [])
    return shown
