"""``/v1/workers`` and ``/v1/tasks`` over real HTTP with a real worker: listed with its tasks,
shown, drained through the API (it stops on its next heartbeat)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cronbus import Worker
from integration.test_api_support import make_app, problem, served, until


async def test_list_show_drain_a_live_worker(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'api.db'}")
    app.settings = app.settings.with_overrides(lease_seconds=1.5)
    async with served(app) as api:
        worker = Worker(app, concurrency=1)
        running = asyncio.create_task(worker.run())
        try:

            async def listed() -> bool:
                body = (await api.call("GET", "/v1/workers")).json()
                return len(body["items"]) == 1

            await until(listed)
            view = (await api.call("GET", "/v1/workers")).json()["items"][0]
            worker_id = view["worker"]["id"]
            assert view["worker"]["state"] == "alive"
            assert "send" in view["worker"]["tasks"]
            shown = await api.call("GET", f"/v1/workers/{worker_id}")
            assert shown.json()["worker"]["id"] == worker_id
            tasks = (await api.call("GET", "/v1/tasks")).json()["items"]
            send = next(t for t in tasks if t["name"] == "send")
            assert (send["registered"], send["workers"], send["queue"]) == (True, 1, "emails")
            read = await api.headers("read")
            refused = await api.client.post(f"/v1/workers/{worker_id}/drain", headers=read)
            problem(refused, 403)
            drained = await api.call("POST", f"/v1/workers/{worker_id}/drain")
            assert drained.status_code == 200, drained.text
            assert drained.json()["worker"]["drain_requested"] is True
            await asyncio.wait_for(running, 10)  # it drains and stops by itself
            stopped = (await api.call("GET", f"/v1/workers/{worker_id}")).json()
            assert stopped["worker"]["state"] == "stopped"
            again = await api.call("POST", f"/v1/workers/{worker_id}/drain")
            problem(again, 409)
            everyone = await api.call("GET", "/v1/workers", params={"include_stopped": True})
            assert len(everyone.json()["items"]) == 1
            assert (await api.call("GET", "/v1/workers")).json()["items"] == []
        finally:
            worker.request_stop(hurry=True)
            await asyncio.wait_for(running, 10)
        problem(await api.call("GET", "/v1/workers/nobody"), 404)
        problem(await api.call("GET", "/v1/workers", params={"state": "zombie"}), 422, "state[0]")
