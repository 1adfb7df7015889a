"""The subscriptions pages: the table (state, lag, success rate, health, circuit), one
subscription with its deliveries, pause / resume / replay, and a delivery with its attempts."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from console.conftest import Console
from console.test_topics import cell
from cronbus.services import Services, SubscriptionInput
from integration.api_seed import OTHER_NAMESPACE, Seeded, _events


@pytest.fixture
async def seeded(console: Console) -> Seeded:
    """Topic ``orders`` (6 events) read by ``hook`` (webhook on loopback: 1 acknowledged, 1
    waiting for a retry, 2 dead, 2 pending deliveries), ``tasked`` (a task, nothing pushed)
    and ``idle`` (paused); and a topic in another namespace."""
    services = Services(console.api.app)
    await services.namespaces.create(OTHER_NAMESPACE)
    found = Seeded(admin_token="", admin_token_id="")
    await _events(console.api.app, services, found)
    return found


def ids_in(html: str) -> list[int]:
    """The delivery ids the deliveries table lists, in order."""
    return [int(n) for n in re.findall(r'data-testid="delivery-(\d+)"', html)]


async def test_the_table_shows_state_lag_success_health_and_circuit(
    console: Console, seeded: Seeded
) -> None:
    browser = await console.login("read", namespaces=["default"])
    try:
        response = await browser.get("/subscriptions")
        assert response.status_code == 200
        html = response.text
        assert 'id="subscriptions"' in html
        assert '<a href="/subscriptions/hook">hook</a>' in html
        assert cell(html, "state-hook") == "active"
        assert cell(html, "state-idle") == "paused"
        assert cell(html, "lag-hook") == "0"  # its dispatcher matched every event
        assert cell(html, "lag-tasked") == "6"  # earliest, nothing matched yet
        assert cell(html, "success-hook") == "33.3 %"  # 1 acknowledged, 2 dead
        assert cell(html, "success-tasked") == "—"
        assert cell(html, "health-hook") == "failing 1 waiting for a retry; 2 dead"
        assert cell(html, "health-tasked") == "ok"
        assert cell(html, "circuit-hook") == "closed"  # 4 pushed, 5 failures open it
        assert "http://127.0.0.1:9/hook" in html
        assert "task</span> <code>on_event</code>" in html
        assert 'aria-current="page">Subscriptions' in html
    finally:
        await browser.close()


async def test_targets_show_masked(console: Console, seeded: Seeded) -> None:
    await Services(console.api.app).subscriptions.create(
        SubscriptionInput(
            name="secretive",
            topic="orders",
            webhook="http://user:pw@127.0.0.1:9/in?token=abc",
            headers={"Authorization": "Bearer hunter2"},
        )
    )
    browser = await console.login("read")
    try:
        for path in ("/subscriptions", "/subscriptions/secretive", "/topics/orders"):
            html = (await browser.get(path)).text
            assert "127.0.0.1:9/in" in html, path
            for secret in ("hunter2", "token=abc", "user:pw"):
                assert secret not in html, (path, secret)
    finally:
        await browser.close()


async def test_a_subscription_shows_deliveries_by_state_and_recent_deliveries(
    console: Console, seeded: Seeded
) -> None:
    browser = await console.login("read", namespaces=["default"])
    try:
        html = (await browser.get("/subscriptions/hook")).text
        counts = {
            state: cell(html, f"count-{state}").split()[-1]
            for state in ("pending", "in_flight", "acked", "retry", "dead")
        }
        assert counts == {"pending": "2", "in_flight": "0", "acked": "1", "retry": "1", "dead": "2"}
        listed = ids_in(html)
        assert sorted(listed, reverse=True) == listed  # newest first
        assert set(listed) == set(seeded.deliveries)
        for delivery_id in listed:
            assert f'href="/deliveries/{delivery_id}"' in html
        assert "33.3 %" in html
        dead = ids_in((await browser.get("/subscriptions/hook?state=dead")).text)
        assert sorted(dead) == sorted(seeded.dead_deliveries)
        # A read-only token sees no change.
        for hook in ('id="pause"', 'id="resume"', 'id="replay"', 'method="post" action="/sub'):
            assert hook not in html
    finally:
        await browser.close()


async def test_the_circuit_shows_open_when_the_newest_pushes_all_failed(
    console: Console, seeded: Seeded
) -> None:
    services = Services(console.api.app)
    browser = await console.login("read")
    try:
        # The two newest pushes (the dead ones) failed: two failures open this circuit.
        await services.subscriptions.update("hook", {"circuit_failures": 2})
        html = (await browser.get("/subscriptions/hook")).text
        assert cell(html, "circuit").startswith("open")
        assert "circuit open" in cell(html, "health")
        # Four failures in a row would: the fourth newest push was acknowledged.
        await services.subscriptions.update("hook", {"circuit_failures": 4})
        html = (await browser.get("/subscriptions/hook")).text
        assert cell(html, "circuit").startswith("closed")
    finally:
        await browser.close()


async def test_pause_and_resume_change_the_subscription(console: Console, seeded: Seeded) -> None:
    services = Services(console.api.app)
    browser = await console.login("write", namespaces=["default"])
    try:
        html = (await browser.get("/subscriptions/hook")).text
        assert 'id="pause"' in html
        assert 'id="resume"' not in html
        paused = await browser.post("/subscriptions/hook/pause")
        assert paused.status_code == 303
        assert paused.headers["location"].startswith("/subscriptions/hook?notice=")
        assert (await services.subscriptions.get("hook")).state == "paused"
        shown = await browser.get(paused.headers["location"])
        assert "subscription hook paused" in shown.text
        assert cell(shown.text, "state").startswith("paused")
        assert 'id="resume"' in shown.text
        assert 'id="pause"' not in shown.text
        resumed = await browser.post("/subscriptions/hook/resume")
        assert resumed.status_code == 303
        assert (await services.subscriptions.get("hook")).state == "active"
    finally:
        await browser.close()


async def test_replay_moves_the_cursor_from_an_offset_or_a_time(
    console: Console, seeded: Seeded
) -> None:
    services = Services(console.api.app)
    browser = await console.login("write", namespaces=["default"])
    try:
        html = (await browser.get("/subscriptions/hook")).text
        assert 'id="replay"' in html
        assert "data-confirm=" in html
        replayed = await browser.post("/subscriptions/hook/replay", {"offset": "3", "since": ""})
        assert replayed.status_code == 303
        assert (await services.subscriptions.get("hook")).subscription.cursor == 2
        notice = (await browser.get(replayed.headers["location"])).text
        assert "cursor moved from 6 to 2" in notice
        first = (await services.topics.read("orders", limit=1)).items[0]
        assert first.published_at is not None
        since = dt.datetime.fromtimestamp(first.published_at - 60, dt.UTC)
        naive = since.replace(tzinfo=None).isoformat(timespec="seconds")  # read as UTC
        again = await browser.post("/subscriptions/hook/replay", {"offset": "", "since": naive})
        assert again.status_code == 303
        assert (await services.subscriptions.get("hook")).subscription.cursor == 0
    finally:
        await browser.close()


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"offset": "soon"}, "offset must be a whole number from 1, got &#39;soon&#39;"),
        ({"offset": "0"}, "offset"),
        ({"offset": "", "since": ""}, "give exactly one of offset or since"),
        ({"offset": "2", "since": "2024-01-01T00:00:00Z"}, "give exactly one of offset or since"),
        ({"since": "yesterday"}, "since must be a date and time like"),
    ],
)
async def test_a_bad_replay_gets_a_400_page_saying_why(
    console: Console, seeded: Seeded, form: dict[str, object], message: str
) -> None:
    services = Services(console.api.app)
    browser = await console.login("write", namespaces=["default"])
    try:
        response = await browser.post("/subscriptions/hook/replay", form)
        assert response.status_code == 400
        assert message in response.text
        assert 'class="error"' in response.text
        assert (await services.subscriptions.get("hook")).subscription.cursor == 6
    finally:
        await browser.close()


async def test_a_read_only_token_cannot_pause(console: Console, seeded: Seeded) -> None:
    browser = await console.login("read", namespaces=["default"])
    try:
        response = await browser.post("/subscriptions/hook/pause")
        assert response.status_code == 403
        assert "this needs scope write" in response.text
        state = (await Services(console.api.app).subscriptions.get("hook")).state
        assert state == "active"
    finally:
        await browser.close()


async def test_unknown_subscriptions_and_deliveries_get_404_pages(
    console: Console, seeded: Seeded
) -> None:
    browser = await console.login("admin", namespaces=[OTHER_NAMESPACE])
    try:
        # hook is in default: from a token of the other namespace it does not exist.
        for path in ("/subscriptions/hook", "/subscriptions/nothing-here"):
            response = await browser.get(path)
            assert response.status_code == 404, path
            assert "no subscription named" in response.text
        delivery = await browser.get(f"/deliveries/{seeded.deliveries[0]}")
        assert delivery.status_code == 404
        assert f"no delivery has id {seeded.deliveries[0]}" in delivery.text
        assert (await browser.get("/deliveries/abc")).status_code == 404
        assert (await browser.get("/deliveries/0")).status_code == 400
        pause = await browser.post("/subscriptions/hook/pause")
        assert pause.status_code == 404
    finally:
        await browser.close()


async def test_bad_listing_parameters_get_400_pages(console: Console, seeded: Seeded) -> None:
    browser = await console.login("read")
    try:
        state = await browser.get("/subscriptions/hook?state=sleeping")
        assert state.status_code == 400
        assert "state must be delivery states" in state.text
        cursor = await browser.get("/subscriptions/hook?cursor=nope")
        assert cursor.status_code == 400
        listing = await browser.get("/subscriptions?cursor=nope")
        assert listing.status_code == 400
    finally:
        await browser.close()


async def test_a_delivery_shows_its_event_and_attempts(console: Console, seeded: Seeded) -> None:
    retried, refused = seeded.deliveries[1], seeded.deliveries[2]
    browser = await console.login("read", namespaces=["default"])
    try:
        html = (await browser.get(f"/deliveries/{retried}")).text
        assert 'id="delivery-attempts"' in html
        assert cell(html, "state").startswith("retry")
        assert cell(html, "attempts") == "1"
        assert cell(html, "status-1") == "503"
        assert cell(html, "response-1") == "busy"
        assert "order.created" in html  # the event it pushes
        assert "total" in html  # its data
        assert 'href="/subscriptions/hook"' in html
        dead = (await browser.get(f"/deliveries/{refused}")).text
        assert cell(dead, "state").startswith("dead")
        assert cell(dead, "error-1") == "connection refused"
        assert cell(dead, "status-1") == "—"
        assert "not due: it ended" in dead
        pending = next(d for d in seeded.deliveries if d not in seeded.deliveries[:4])
        waiting = (await browser.get(f"/deliveries/{pending}")).text
        assert "Not pushed yet." in waiting
    finally:
        await browser.close()


async def test_a_delivery_hides_event_data_from_a_token_without_payloads(
    console: Console, seeded: Seeded
) -> None:
    browser = await console.login("read", namespaces=["default"], payloads=False)
    try:
        html = (await browser.get(f"/deliveries/{seeded.deliveries[1]}")).text
        assert "[redacted]" in html
        assert "total" not in html
    finally:
        await browser.close()


async def test_the_lists_refresh_as_htmx_partials(console: Console, seeded: Seeded) -> None:
    browser = await console.login("read")
    try:
        listing = await browser.get("/subscriptions", headers={"HX-Request": "true"})
        assert listing.text.lstrip().startswith('<div id="subscriptions-live"')
        assert 'hx-trigger="cb:changed from:body"' in listing.text
        one = await browser.get("/subscriptions/hook", headers={"HX-Request": "true"})
        assert one.text.lstrip().startswith('<div id="subscription-live"')
        assert "<html" not in one.text
    finally:
        await browser.close()


async def test_a_subscription_cronbus_disabled_is_failing_and_can_be_resumed(
    console: Console, seeded: Seeded
) -> None:
    app = console.api.app
    # What a dispatcher does when the target answers 410 Gone.
    await app.store.set_subscription_paused(
        "tasked", True, "the target answered 410 Gone", app.clock.now()
    )
    browser = await console.login("write", namespaces=["default"])
    try:
        listed = (await browser.get("/subscriptions")).text
        assert cell(listed, "state-tasked") == "disabled"
        assert cell(listed, "health-tasked") == "failing disabled: the target answered 410 Gone"
        html = (await browser.get("/subscriptions/tasked")).text
        assert 'id="resume"' in html
        assert 'id="pause"' not in html
        resumed = await browser.post("/subscriptions/tasked/resume")
        assert resumed.status_code == 303
        assert (await Services(app).subscriptions.get("tasked")).state == "active"
    finally:
        await browser.close()
