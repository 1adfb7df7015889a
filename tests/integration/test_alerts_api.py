"""``GET /v1/alerts`` and ``GET /v1/alerts/history`` in process (ASGI): rules masked, alerts
firing, silences, the history paged, a bad rule name refused, another namespace's kept apart."""

from __future__ import annotations

from pathlib import Path

from cronbus.model import WorkerInfo
from cronbus.observability.alerts import chat, webhook
from cronbus.observability.alerts.engine import AlertEngine
from cronbus.observability.alerts.settings import AlertSettings
from cronbus.services import Services
from cronbus.services.alerts import AlertsService
from integration.test_api_support import in_process, make_app, problem

SECRET = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="


async def test_rules_alerts_silences_and_history(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'api.db'}")
    app.alerts.add("worker-lost", name="lost", to=[chat("http://127.0.0.1:9/T/B/XYZ")])
    async with in_process(app) as api:
        service = AlertsService(Services(app).context)
        await service.add(
            "queue-depth",
            queue="emails",
            threshold=5,
            to=[webhook("http://127.0.0.1:9/h?token=abc", secret=SECRET)],
        )
        await service.silence("queue-depth-emails", "1h", reason="deploy")
        now = app.clock.now()
        await app.store.register_worker(
            WorkerInfo(
                id="w1",
                host="h",
                pid=1,
                queues=["*"],
                concurrency=1,
                version="t",
                started_at=now - 600,
                heartbeat_at=now - 600,
            )
        )
        settings = AlertSettings(alert_send_seconds=2)
        await AlertEngine(app, settings=settings).evaluate_once()

        listed = await api.call("GET", "/v1/alerts", scope="read")
        assert listed.status_code == 200, listed.text
        body = listed.json()
        assert [(r["name"], r["source"]) for r in body["rules"]] == [
            ("lost", "code"),
            ("queue-depth-emails", "store"),
        ]
        for secret in ("XYZ", "abc", SECRET):
            assert secret not in listed.text
        assert [(a["rule"], a["subject"], a["firing"]) for a in body["firing"]] == [
            ("lost", "w1", True)
        ]
        assert [(s["rule"], s["reason"]) for s in body["silences"]] == [
            ("queue-depth-emails", "deploy")
        ]

        first = await api.call("GET", "/v1/alerts/history", params={"limit": 1})
        assert first.status_code == 200, first.text
        page = first.json()
        assert [e["kind"] for e in page["items"]] == ["failed"]
        following = await api.call(
            "GET", "/v1/alerts/history", params={"limit": 1, "cursor": page["next_cursor"]}
        )
        assert [e["kind"] for e in following.json()["items"]] == ["fired"]
        only = await api.call("GET", "/v1/alerts/history", params={"rule": "other"})
        assert only.json()["items"] == []
        problem(await api.call("GET", "/v1/alerts/history", params={"rule": "a b"}), 422)

        elsewhere = await api.call("GET", "/v1/alerts", headers={"X-Cronbus-Namespace": "shop"})
        assert elsewhere.json() == {"rules": [], "firing": [], "silences": []}
