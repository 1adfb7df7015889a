"""The alert engine around the rules: a failing destination does not hold back the others and
is retried at the next evaluation; stored and custom rules; one evaluator in a cluster (the
``alerts`` role lease); the ``run`` loop on the app's clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cronbus.errors import ConflictError, InvalidArgumentError, NotFoundError
from cronbus.model import WorkerInfo
from cronbus.observability.alerts import HistoryKind, webhook
from cronbus.observability.alerts.engine import AlertEngine
from cronbus.observability.alerts.rules import Figures
from cronbus.services import Services
from cronbus.services.alerts import AlertsService
from integration.test_alerts_fixtures import SECRET, Rig, rig_fixture  # noqa: F401 (the fixture)


def alerts(rig: Rig) -> AlertsService:
    return AlertsService(Services(rig.app).context)


async def lost_worker(rig: Rig, worker_id: str = "w1") -> None:
    now = rig.clock.now()
    await rig.app.store.register_worker(
        WorkerInfo(
            id=worker_id,
            host="h",
            pid=1,
            queues=["*"],
            concurrency=1,
            version="t",
            started_at=now - 100,
            heartbeat_at=now - 100,
        )
    )


async def history(rig: Rig) -> list[tuple[HistoryKind, str | None]]:
    page = await alerts(rig).history()
    return [(e.kind, e.detail) for e in reversed(page.items)]


async def until(check: Any, timeout: float = 30.0, tick: Any = None) -> None:
    """Poll ``check`` (calling ``tick`` between polls) until it holds, failing after
    ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        if tick is not None:
            tick()
        await asyncio.sleep(0.01)


async def test_a_failing_destination_is_retried_without_holding_back_the_others(rig: Rig) -> None:
    rig.receiver.failing.add("/hook")
    rig.app.alerts.add("worker-lost", to=rig.destinations, repeat=0)
    await lost_worker(rig)
    await rig.evaluate()
    assert len(rig.receiver.on("/hook")) == 1  # tried, answered 500
    _, texts, mails = rig.told()
    assert (len(texts), len(mails)) == (1, 1)
    (state,) = await rig.app.store.list_alert_states()
    assert len(state.pending) == 1
    assert state.pending[0].startswith("webhook:")
    kinds = await history(rig)
    assert kinds[0][0] is HistoryKind.FIRED
    assert kinds[1][0] is HistoryKind.FAILED
    assert "HTTP 500" in (kinds[1][1] or "")

    await rig.evaluate(5)  # retried: still failing, recorded once
    assert len(rig.receiver.on("/hook")) == 2
    assert len(await history(rig)) == 2
    rig.receiver.failing.clear()
    await rig.evaluate(5)
    hooks, texts, mails = rig.told()
    assert len(hooks) == 3  # the third one arrived (the first two were refused)
    assert (len(texts), len(mails)) == (1, 1)  # the others were not told twice
    assert hooks[-1]["type"] == "cronbus.alert.fired"
    assert (await history(rig))[-1][0] is HistoryKind.DELIVERED
    (state,) = await rig.app.store.list_alert_states()
    assert state.pending == ()


async def test_an_unreachable_smtp_server_fails_only_the_email(rig: Rig) -> None:
    from cronbus.observability.alerts import email

    dead_mail = email("ops@example.com", host="127.0.0.1", port=1)
    rig.app.alerts.add("worker-lost", to=[dead_mail, webhook(rig.receiver.url("/hook"))])
    await lost_worker(rig)
    await rig.evaluate()
    assert len(rig.receiver.on("/hook")) == 1
    kinds = await history(rig)
    assert kinds[-1][0] is HistoryKind.FAILED
    assert (kinds[-1][1] or "").startswith("email ops@example.com: ")


async def test_stored_rules_fire_and_their_secrets_stay_masked(rig: Rig) -> None:
    service = alerts(rig)
    added = await service.add(
        "worker-lost", to=[webhook(rig.receiver.url("/hook?token=abc"), secret=SECRET)]
    )
    shown = str([rule.public() for rule in await service.rules()])
    assert "abc" not in shown
    assert SECRET not in shown
    await lost_worker(rig)
    await rig.evaluate()
    hooks, _, _ = rig.told()
    assert [h["rule"] for h in hooks] == [added.name]
    with pytest.raises(ConflictError):
        await service.add("worker-lost", to=rig.destinations)
    await service.remove(added.name)
    assert await rig.app.store.list_alert_states() == []
    with pytest.raises(NotFoundError):
        await service.remove(added.name)


async def test_code_rules_cannot_be_shadowed_removed_or_silenced_when_unknown(rig: Rig) -> None:
    rig.app.alerts.add("worker-lost", name="lost", to=rig.destinations)
    service = alerts(rig)
    with pytest.raises(ConflictError, match="defined in the app's code"):
        await service.add("queue-unserved", name="lost", to=rig.destinations)
    with pytest.raises(ConflictError, match="remove it there"):
        await service.remove("lost")
    with pytest.raises(NotFoundError, match="nope"):
        await service.silence("nope", 60)
    with pytest.raises(InvalidArgumentError, match="duration"):
        await service.silence("lost", "soon")
    assert await service.silence("lost", 0) is None  # 0 ends a silence (there was none)


async def test_a_custom_check_fires_per_subject_and_a_failing_check_changes_nothing(
    rig: Rig,
) -> None:
    backlog: dict[str, Any] = {"eu": "orders stuck in eu"}

    @rig.app.alert(to=rig.destinations, name="orders", repeat=0)
    async def orders(figures: Figures) -> dict[str, Any]:
        if backlog.get("boom"):
            raise RuntimeError("the check broke")
        return backlog

    await rig.evaluate()
    hooks, _, _ = rig.told()
    assert [(h["subject"], h["message"]) for h in hooks] == [("eu", "orders stuck in eu")]
    backlog["boom"] = True
    await rig.evaluate(5)
    assert len(await rig.app.store.list_alert_states()) == 1  # kept, not resolved
    backlog.clear()
    await rig.evaluate(5)
    hooks, _, _ = rig.told()
    assert hooks[-1]["type"] == "cronbus.alert.resolved"


async def test_one_engine_of_a_cluster_evaluates(rig: Rig) -> None:
    rig.app.alerts.add("worker-lost", to=rig.destinations)
    await lost_worker(rig)
    first, second = rig.engine, AlertEngine(rig.app, settings=rig.engine.settings)
    if hasattr(rig.app.store, "lease_clock"):
        from cronbus.store.fencing import CALLER_CLOCK

        rig.app.store.lease_clock = CALLER_CLOCK
    assert await first.tick()
    assert not await second.tick()
    assert len(rig.receiver.on("/hook")) == 1  # fired once, not once per engine
    rig.clock.advance(first.settings.alert_lease_seconds + 1)  # the first one died
    assert await second.tick()
    assert len(rig.receiver.on("/hook")) == 1  # the state is in the store: no second fire


async def test_run_evaluates_on_the_app_clock_until_stopped(rig: Rig) -> None:
    rig.app.alerts.add("worker-lost", to=rig.destinations, repeat=10)
    await lost_worker(rig)
    stop = asyncio.Event()
    running = asyncio.create_task(rig.engine.run(stop))
    await until(lambda: len(rig.receiver.on("/hook")) == 1)
    fired_at = rig.clock.now()
    # Time moves a second per poll: the loop wakes every alert_seconds of it, and repeats
    # the notice once 10 s have passed, not before.
    await until(lambda: len(rig.receiver.on("/hook")) >= 2, tick=lambda: rig.clock.advance(1))
    assert rig.clock.now() - fired_at >= 10
    stop.set()
    await asyncio.wait_for(running, 10)
    assert await rig.app.store.lease_holder("alerts", rig.clock.now()) is None
