"""Access rules and page cursors, the pure parts of the service layer: scopes ordered
read < write < admin, namespaces limited or every one, refusals naming what is missing, and
cursors that refuse anything but what a listing gave."""

from __future__ import annotations

import base64

import pytest

from cronbus.errors import ForbiddenError, InvalidArgumentError
from cronbus.services import LOCAL, Access, Scope
from cronbus.services.access import check_scope
from cronbus.services.pages import check_limit, decode_cursor, encode_cursor, page_of


def test_scopes_are_ordered() -> None:
    assert Scope.ADMIN.covers(Scope.WRITE)
    assert Scope.WRITE.covers(Scope.READ)
    assert not Scope.READ.covers(Scope.WRITE)
    assert not Scope.WRITE.covers(Scope.ADMIN)
    with pytest.raises(InvalidArgumentError) as caught:
        check_scope("root")
    assert caught.value.field == "scope"


def test_access_requires_scope_and_namespace() -> None:
    reader = Access.of("r", "read", ["shop"], token_id="0123456789ab")
    reader.require(Scope.READ, "shop")
    with pytest.raises(ForbiddenError, match="token 0123456789ab has scope read; this needs"):
        reader.require(Scope.WRITE, "shop")
    with pytest.raises(ForbiddenError, match="may not use namespace 'default'"):
        reader.require(Scope.READ, "default")
    with pytest.raises(ForbiddenError, match="needs access to every namespace"):
        Access.of("a", "admin", ["shop"]).require(Scope.ADMIN, None)
    everyone = Access.of("w", "write", ["*"])
    assert everyone.every_namespace
    assert everyone.allows(Scope.WRITE, "anything")
    assert not everyone.allows(Scope.ADMIN)
    LOCAL.require(Scope.ADMIN, None)


def test_limits() -> None:
    assert check_limit(1) == 1
    assert check_limit(250) == 250
    for bad in (0, 251, True, 2.0, "5", None):
        with pytest.raises(InvalidArgumentError) as caught:
            check_limit(bad)
        assert caught.value.field == "limit"


def test_cursors_are_opaque_and_checked() -> None:
    cursor = encode_cursor({"b": 42})
    assert "42" not in cursor  # base64url, not the JSON itself
    assert decode_cursor(cursor, {"b": int}) == {"b": 42}
    forged = [
        "",
        "!!!",
        "x" * 2000,
        base64.urlsafe_b64encode(b"[1]").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        encode_cursor({"b": 1, "extra": 2}),
        encode_cursor({"b": None}),
        encode_cursor({"n": ""}),
        encode_cursor({"b": 2**63}),
        encode_cursor({"b": -(2**70)}),
    ]
    for bad in forged:
        with pytest.raises(InvalidArgumentError) as caught:
            decode_cursor(bad, {"b": int})
        assert caught.value.field == "cursor"
    with pytest.raises(InvalidArgumentError):
        decode_cursor(encode_cursor({"n": ""}), {"n": str})
    assert decode_cursor(encode_cursor({"t": 1}), {"t": float}) == {"t": 1}
    assert decode_cursor(encode_cursor({"b": 2**63 - 1}), {"b": int}) == {"b": 2**63 - 1}


def test_page_of_reads_one_more_to_know_the_next() -> None:
    full = page_of([5, 4, 3], 2, lambda i: {"b": i})
    assert full.items == [5, 4]
    assert full.next is not None
    assert decode_cursor(full.next, {"b": int}) == {"b": 4}
    last = page_of([2, 1], 2, lambda i: {"b": i})
    assert last.next is None
