"""The alert store (both stores): rules, states, silences and history, as the evaluator and the
CLI use them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cronbus.errors import ConflictError, NotFoundError
from cronbus.observability.alerts import (
    AlertRule,
    AlertState,
    HistoryEntry,
    HistoryKind,
    NoticeKind,
    Silence,
    build_rule,
    email,
    webhook,
)
from cronbus.store import Store

T0 = 1_700_000_000.0
SECRET = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="


def _rule(name: str = "deep", namespace: str = "default", queue: str = "emails") -> AlertRule:
    return build_rule(
        "queue-depth",
        name=name,
        namespace=namespace,
        queue=queue,
        threshold=100,
        repeat="30m",
        to=[
            webhook("http://127.0.0.1:9/hook", secret=SECRET),
            email("ops@example.com", password="hunter2"),
        ],
    )


def _state(rule: str = "deep", subject: str = "emails", **changes: object) -> AlertState:
    fields: dict[str, object] = {
        "rule": rule,
        "subject": subject,
        "namespace": "default",
        "firing": True,
        "since": T0,
        "message": "queue emails: 120 runs queued",
        "notified_at": T0,
        "notice": NoticeKind.FIRED,
        "notice_message": "queue emails: 120 runs queued",
        "pending": ("webhook:abc", "email:def"),
        "updated_at": T0,
    }
    fields.update(changes)
    return AlertState(**fields)  # type: ignore[arg-type]


def _entry(rule: str, kind: HistoryKind, at: float, namespace: str = "default") -> HistoryEntry:
    return HistoryEntry(
        at=at, rule=rule, subject="emails", namespace=namespace, kind=kind, message=f"{kind} {at}"
    )


async def test_a_rule_is_stored_and_read_back_whole(store: Store) -> None:
    rule = _rule()
    stored = await store.put_alert_rule(rule, T0)
    assert stored.created_at == T0
    read = await store.get_alert_rule("deep")
    assert read.kind is rule.kind
    assert read.params() == rule.params()
    assert read.repeat == 1800.0
    assert read.namespace == "default"
    assert read.source == "store"
    assert read.destinations == rule.destinations  # secrets kept for sending
    assert read.destinations[1].password == "hunter2"
    assert read.created_at == T0


async def test_rule_names_are_unique_in_the_store(store: Store) -> None:
    await store.put_alert_rule(_rule(), T0)
    with pytest.raises(ConflictError, match="deep"):
        await store.put_alert_rule(_rule(namespace="shop"), T0)


async def test_rules_are_listed_by_name_per_namespace(store: Store) -> None:
    for name, namespace in (("b", "default"), ("a", "default"), ("c", "shop")):
        await store.put_alert_rule(_rule(name, namespace), T0)
    assert [r.name for r in await store.list_alert_rules()] == ["a", "b", "c"]
    assert [r.name for r in await store.list_alert_rules("default")] == ["a", "b"]
    assert [r.name for r in await store.list_alert_rules("shop")] == ["c"]


async def test_deleting_a_rule_takes_its_states_and_silence_not_its_history(
    store: Store,
) -> None:
    await store.put_alert_rule(_rule(), T0)
    await store.save_alerts([_state()], [], [_entry("deep", HistoryKind.FIRED, T0)])
    await store.set_alert_silence(
        Silence(namespace="default", rule="deep", until=T0 + 60, created_at=T0)
    )
    await store.delete_alert_rule("deep")
    with pytest.raises(NotFoundError):
        await store.get_alert_rule("deep")
    assert await store.list_alert_states() == []
    assert await store.list_alert_silences() == []
    assert [e.rule for e in await store.list_alert_history()] == ["deep"]
    with pytest.raises(NotFoundError, match="deep"):
        await store.delete_alert_rule("deep")


async def test_states_are_written_replaced_and_forgotten_with_history_in_one_call(
    store: Store,
) -> None:
    first = _state()
    other = _state(subject="sms", pending=())
    await store.save_alerts([first, other], [], [_entry("deep", HistoryKind.FIRED, T0)])
    assert await store.list_alert_states() == [first, other]
    resolved = _state(
        firing=False,
        notice=NoticeKind.RESOLVED,
        message="resolved",
        notice_message="resolved",
        pending=("email:def",),
        notified_at=T0 + 5,
        updated_at=T0 + 5,
    )
    await store.save_alerts(
        [resolved],
        [("default", "deep", "sms")],
        [_entry("deep", HistoryKind.RESOLVED, T0 + 5)],
    )
    assert await store.list_alert_states() == [resolved]
    assert await store.list_alert_states("shop") == []
    kinds = [e.kind for e in await store.list_alert_history()]
    assert kinds == [HistoryKind.RESOLVED, HistoryKind.FIRED]


async def test_saving_nothing_is_a_no_op(store: Store) -> None:
    await store.save_alerts([], [], [])
    assert await store.list_alert_states() == []


async def test_silences_replace_each_other_and_end(store: Store) -> None:
    await store.set_alert_silence(
        Silence(namespace="default", rule="deep", until=T0 + 60, created_at=T0)
    )
    longer = Silence(
        namespace="default", rule="deep", until=T0 + 3600, reason="maintenance", created_at=T0 + 1
    )
    everything = Silence(namespace="shop", rule="*", until=T0 + 10, created_at=T0)
    await store.set_alert_silence(longer)
    await store.set_alert_silence(everything)
    assert await store.list_alert_silences() == [longer, everything]
    assert await store.list_alert_silences("shop") == [everything]
    assert await store.delete_alert_silence("default", "deep")
    assert not await store.delete_alert_silence("default", "deep")
    assert await store.list_alert_silences() == [everything]


async def test_history_pages_newest_first_by_namespace_and_rule(store: Store) -> None:
    entries = [
        _entry("deep", HistoryKind.FIRED, T0),
        _entry("lost", HistoryKind.FIRED, T0 + 1),
        _entry("deep", HistoryKind.FAILED, T0 + 2),
        _entry("deep", HistoryKind.RESOLVED, T0 + 3, namespace="shop"),
    ]
    await store.save_alerts([], [], entries)
    every = await store.list_alert_history()
    assert [e.at for e in every] == [T0 + 3, T0 + 2, T0 + 1, T0]
    assert every[0].id > every[1].id > every[2].id > every[3].id
    assert every[1] == replace(entries[2], id=every[1].id)
    page = await store.list_alert_history(namespace="default", limit=2)
    assert [e.at for e in page] == [T0 + 2, T0 + 1]
    rest = await store.list_alert_history(namespace="default", before_id=page[-1].id)
    assert [e.at for e in rest] == [T0]
    deep = await store.list_alert_history(namespace="default", rule="deep")
    assert [e.kind for e in deep] == [HistoryKind.FAILED, HistoryKind.FIRED]
    anywhere = await store.list_alert_history(rule="deep")
    assert [e.namespace for e in anywhere] == ["shop", "default", "default"]


async def test_old_history_is_trimmed_in_batches(store: Store) -> None:
    await store.save_alerts([], [], [_entry("deep", HistoryKind.FIRED, T0 + n) for n in range(5)])
    assert await store.trim_alert_history(T0 + 3, limit=2) == 2
    assert await store.trim_alert_history(T0 + 3, limit=2) == 1
    assert await store.trim_alert_history(T0 + 3, limit=2) == 0
    assert [e.at for e in await store.list_alert_history()] == [T0 + 4, T0 + 3]
