"""The topics pages: the table of topics, one topic's facts, subscriptions and recent events."""

from __future__ import annotations

import datetime as dt
import re

from console.conftest import Browser, Console
from cronbus.services import EventInput, Services, SubscriptionInput


def cell(html: str, testid: str) -> str:
    """The text inside the element carrying ``data-testid=testid`` (tags stripped)."""
    pattern = rf'<(\w+)[^>]*\sdata-testid="{re.escape(testid)}"[^>]*>(.*?)</\1>'
    found = re.search(pattern, html, re.S)
    assert found, f"no element {testid!r} in the page"
    return re.sub(r"<[^>]+>", "", found[2]).strip()


def iso(epoch: float) -> str:
    """The ``datetime`` attribute the pages give a time."""
    stamp = dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds")
    return stamp.replace("+00:00", "Z")


async def fill(console: Console) -> Services:
    """Two topics of the default namespace (one with retention and two subscriptions), and
    one of another namespace."""
    services = Services(console.api.app)
    await services.topics.publish(
        "orders",
        [EventInput(type="order.created", data={"id": n, "secret": f"s{n}"}) for n in range(1, 4)],
    )
    await services.topics.set_retention("orders", max_age=86_400.0, max_events=500)
    await services.topics.publish("audit.trail", [EventInput(type="audit", subject="x")])
    for name in ("mailer", "billing"):
        await services.subscriptions.create(
            SubscriptionInput(name=name, topic="orders", task="on_event", start="earliest")
        )
    await services.namespaces.create("shop")
    await services.using("shop").topics.publish("shop.events", [EventInput(type="opened")])
    return services


async def test_the_topics_table_shows_offsets_retention_subscriptions_and_newest(
    console: Console,
) -> None:
    services = await fill(console)
    newest = (await services.topics.read("orders", after=2)).items[0]
    browser = await console.login("read", namespaces=["default"])
    try:
        response = await browser.get("/topics")
        assert response.status_code == 200
        html = response.text
        assert 'id="topics"' in html
        assert '<a href="/topics/orders">orders</a>' in html
        assert cell(html, "events-orders") == "3 / 3"
        assert cell(html, "subscriptions-orders") == "2"
        assert cell(html, "events-audit.trail") == "1 / 1"
        assert cell(html, "subscriptions-audit.trail") == "0"
        assert "at most 1.0 d, at most 500 events" in html
        assert "keeps every event" in html  # audit.trail has no retention
        assert newest.published_at is not None
        assert iso(newest.published_at) in html
        assert "shop.events" not in html  # another namespace's topic
        assert 'aria-current="page">Topics' in html
    finally:
        await browser.close()


async def test_a_topic_shows_its_facts_subscriptions_with_lag_and_recent_events(
    console: Console,
) -> None:
    services = await fill(console)
    await services.subscriptions.create(
        SubscriptionInput(name="late", topic="orders", task="on_event")  # starts at the end
    )
    browser = await console.login("read", namespaces=["default"])
    try:
        html = (await browser.get("/topics/orders")).text
        assert cell(html, "subscription-mailer").startswith("mailer")
        # Nothing pushes in these tests: an earliest subscription lags the whole topic.
        assert cell(html, "lag-mailer") == "3"
        assert cell(html, "lag-late") == "0"
        assert 'id="events"' in html
        rows = re.findall(r'data-testid="event-(\d+)"', html)
        assert rows == ["3", "2", "1"]  # newest first
        assert "order.created" in html
        assert "&#34;secret&#34;: &#34;s3&#34;" in html  # the data, escaped
        assert "[redacted]" not in html
    finally:
        await browser.close()


async def test_events_are_redacted_for_a_token_without_payloads(console: Console) -> None:
    await fill(console)
    browser = await console.login("read", namespaces=["default"], payloads=False)
    try:
        html = (await browser.get("/topics/orders")).text
        assert "[redacted]" in html
        assert "s3" not in html
        assert "order.created" in html  # the event itself is shown
    finally:
        await browser.close()


async def test_older_events_are_a_page_away(console: Console) -> None:
    services = Services(console.api.app)
    await services.topics.publish("ticks", [EventInput(type="tick", data=n) for n in range(1, 31)])
    browser = await console.login("read")
    try:
        html = (await browser.get("/topics/ticks")).text
        shown = [int(n) for n in re.findall(r'data-testid="event-(\d+)"', html)]
        assert shown == list(range(30, 5, -1))
        assert 'href="/topics/ticks?before=6"' in html
        older = (await browser.get("/topics/ticks?before=6")).text
        assert [int(n) for n in re.findall(r'data-testid="event-(\d+)"', older)] == [5, 4, 3, 2, 1]
        assert "Older events" not in older
        assert "Newest events" in older
    finally:
        await browser.close()


async def test_unknown_topics_and_bad_offsets_get_error_pages(console: Console) -> None:
    await fill(console)
    browser = await console.login("read", namespaces=["default"])
    try:
        missing = await browser.get("/topics/nowhere")
        assert missing.status_code == 404
        assert "no topic named &#39;nowhere&#39;" in missing.text
        elsewhere = await browser.get("/topics/shop.events")  # another namespace's
        assert elsewhere.status_code == 404
        bad = await browser.get("/topics/orders?before=soon")
        assert bad.status_code == 400
        assert "before must be an event offset" in bad.text
        invalid = await browser.get("/topics/no%20spaces")
        assert invalid.status_code == 400
        assert "invalid topic name" in invalid.text
    finally:
        await browser.close()


async def test_a_topic_claimed_by_a_subscription_has_a_page_before_its_first_event(
    console: Console,
) -> None:
    services = Services(console.api.app)
    await services.subscriptions.create(
        SubscriptionInput(name="waiting", topic="quiet", task="on_event")
    )
    browser = await console.login("read")
    try:
        listed = (await browser.get("/topics")).text
        assert cell(listed, "events-quiet") == "0 / 0"
        response = await browser.get("/topics/quiet")
        assert response.status_code == 200
        assert "No event kept" in response.text
        assert cell(response.text, "lag-waiting") == "0"
    finally:
        await browser.close()


async def test_an_htmx_refresh_gets_the_live_part_alone(console: Console) -> None:
    await fill(console)
    browser: Browser = await console.login("read")
    try:
        response = await browser.get("/topics", headers={"HX-Request": "true"})
        assert response.status_code == 200
        assert response.text.lstrip().startswith('<div id="topics-live"')
        assert "<html" not in response.text
        assert 'hx-trigger="cb:changed from:body"' in response.text
        one = await browser.get("/topics/orders", headers={"HX-Request": "true"})
        assert one.text.lstrip().startswith('<div id="topic-live"')
    finally:
        await browser.close()
