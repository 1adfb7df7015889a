"""``/v1/tokens`` and ``/v1/namespaces`` as the tokens and namespaces services' methods."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from ..admin_records import Namespace, TokenRecord
from ..services.access import Scope
from .http import Transport, decode
from .pages import page


class RemoteTokens:
    """API tokens, on a server (the methods of :class:`~cronbus.services.tokens.TokensService`
    but ``authenticate``, which is the server's)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def create(
        self,
        name: str,
        scope: Scope | str,
        namespaces: Iterable[str],
        expires_in: float | None = None,
        payloads: bool = True,
    ) -> tuple[TokenRecord, str]:
        """Create a token (``payloads=False``: it sees runs' arguments and results redacted);
        returns its record and its text, shown this once."""
        body: dict[str, Any] = {
            "name": name,
            "scope": str(scope),
            "namespaces": [namespaces] if isinstance(namespaces, str) else list(namespaces),
            "payloads": payloads,
        }
        if expires_in is not None:
            body["expires_in"] = expires_in
        answer = await self._http.post("/v1/tokens", body)
        text = answer.pop("token", "") if isinstance(answer, dict) else ""
        return _token(answer), str(text)

    async def list(self) -> builtins.list[TokenRecord]:
        """Every token, oldest first, without its hash."""
        body = await self._http.get("/v1/tokens")
        items = body.get("items", []) if isinstance(body, dict) else []
        return [_token(item) for item in items]

    async def revoke(self, token_id: str) -> TokenRecord:
        """Revoke a token."""
        return _token(await self._http.delete("/v1/tokens/" + quote(token_id, safe="")))


class RemoteNamespaces:
    """Namespaces, on a server (the methods of
    :class:`~cronbus.services.namespaces.NamespacesService`)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    async def list(self) -> builtins.list[Namespace]:
        """The namespaces the token may use, by name."""
        return page(Namespace, await self._http.get("/v1/namespaces")).items

    async def create(self, name: str) -> Namespace:
        """Create a namespace."""
        return decode(Namespace, await self._http.post("/v1/namespaces", {"name": name}))

    async def delete(self, name: str) -> None:
        """Delete an empty namespace."""
        await self._http.delete("/v1/namespaces/" + quote(name, safe=""))


def _token(body: Any) -> TokenRecord:
    """A token record from the API, which never sends the hash."""
    given = dict(body) if isinstance(body, dict) else {}
    given.setdefault("hash", "")
    return decode(TokenRecord, given)
