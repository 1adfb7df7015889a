"""``/v1/topics`` over real HTTP: publish one event or a batch, read from an offset page by
page, topics listed and shown, retention; bad events refused naming the field, all or none."""

from __future__ import annotations

from integration.test_api_support import Api, api, problem

__all__ = ["api"]


async def test_publish_one_and_a_batch_then_read_from_an_offset(api: Api) -> None:
    one = await api.call(
        "POST", "/v1/topics/orders/events", json={"type": "order.created", "data": {"id": 1}}
    )
    assert one.status_code == 201, one.text
    assert one.json()["created"] is True
    assert one.json()["event"]["offset"] == 1
    assert one.json()["event"]["topic"] == "orders"
    events = [{"type": "order.paid", "data": {"id": i}, "id": f"e-{i}"} for i in range(2, 7)]
    batch = await api.call("POST", "/v1/topics/orders/events/batch", json={"events": events})
    assert batch.status_code == 201
    assert [p["event"]["offset"] for p in batch.json()] == [2, 3, 4, 5, 6]
    # The same ids again are stored once.
    again = await api.call("POST", "/v1/topics/orders/events/batch", json={"events": events[:1]})
    assert again.json()[0]["created"] is False
    seen: list[int] = []
    link: str | None = "/v1/topics/orders/events?after=1&limit=2"
    while link is not None:
        body = (await api.call("GET", link)).json()
        seen += [event["offset"] for event in body["items"]]
        link = body["next"]
    assert seen == [2, 3, 4, 5, 6]
    data = (await api.call("GET", "/v1/topics/orders/events", params={"after": 5})).json()
    assert [(e["offset"], e["data"]) for e in data["items"]] == [(6, {"id": 6})]


async def test_topics_listed_shown_and_retained(api: Api) -> None:
    await api.call("POST", "/v1/topics/audit-trail/events", json={"type": "x.y"})
    listed = (await api.call("GET", "/v1/topics")).json()
    assert [t["name"] for t in listed["items"]] == ["audit-trail"]
    shown = await api.call("GET", "/v1/topics/audit-trail")
    assert (shown.json()["last_offset"], shown.json()["events"]) == (1, 1)
    kept = await api.call(
        "PUT", "/v1/topics/audit-trail/retention", json={"max_age": 3600, "max_events": 10}
    )
    assert kept.status_code == 200
    assert (kept.json()["max_age"], kept.json()["max_events"]) == (3600, 10)
    problem(
        await api.call("PUT", "/v1/topics/audit-trail/retention", json={"max_events": 0}),
        422,
        "max_events",
    )


async def test_bad_events_are_refused_whole(api: Api) -> None:
    good = {"type": "order.created"}
    bad_batch = {"events": [good, {"type": "has space"}]}
    problem(
        await api.call("POST", "/v1/topics/t/events/batch", json=bad_batch), 422, "events[1].type"
    )
    problem(await api.call("POST", "/v1/topics/t/events", json={"data": 1}), 422, "type")
    problem(await api.call("POST", "/v1/topics/t/events", json={**good, "extra": 1}), 422, "extra")
    problem(await api.call("POST", "/v1/topics/t/events/batch", json={"events": []}), 422, "events")
    problem(await api.call("POST", "/v1/topics/bad%20name/events", json=good), 422, "topic")
    problem(await api.call("POST", "/v1/topics/cronbus.runs/events", json=good), 422, "topic")
    problem(await api.call("GET", "/v1/topics/t/events", params={"after": -1}), 422, "after")
    # Nothing was appended by any of them.
    assert (await api.call("GET", "/v1/topics")).json()["items"] == []
    # A topic never written to reads as empty (publishing creates it).
    assert (await api.call("GET", "/v1/topics/never")).json()["last_offset"] == 0
