"""``/v1/jobs`` over real HTTP: create, read, list in pages, change, pause, resume, trigger,
next fire times, delete; refusals name the option at fault and store nothing."""

from __future__ import annotations

import itertools
from typing import Any

from integration.test_api_support import Api, api, problem

__all__ = ["api"]


async def create(api: Api, name: str, **options: Any) -> dict[str, Any]:
    body = {"name": name, "task": "send", "every": 60, "args": ["a@x"], **options}
    response = await api.call("POST", "/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


async def test_create_read_change_delete(api: Api) -> None:
    job = await create(api, "digest", queue="default", priority=2)
    assert job["spec"]["name"] == "digest"
    assert job["spec"]["trigger"]["kind"] == "every"
    assert (job["spec"]["queue"], job["spec"]["priority"]) == ("default", 2)
    assert job["next_fire_at"] is not None
    shown = await api.call("GET", "/v1/jobs/digest")
    assert shown.json() == job
    changed = await api.call("PATCH", "/v1/jobs/digest", json={"priority": 5})
    assert changed.status_code == 200
    assert changed.json()["spec"]["priority"] == 5
    assert changed.json()["spec"]["trigger"] == job["spec"]["trigger"]
    rescheduled = await api.call("PATCH", "/v1/jobs/digest", json={"cron": "0 0 * * *"})
    assert rescheduled.json()["spec"]["trigger"]["kind"] == "cron"
    deleted = await api.call("DELETE", "/v1/jobs/digest")
    assert deleted.status_code == 200
    assert deleted.json()["spec"]["name"] == "digest"
    problem(await api.call("GET", "/v1/jobs/digest"), 404)


async def test_names_may_hold_slashes(api: Api) -> None:
    await create(api, "reports/daily")
    assert (await api.call("GET", "/v1/jobs/reports/daily")).json()["spec"]["name"] == (
        "reports/daily"
    )
    fires = await api.call("GET", "/v1/jobs/reports/daily/next", params={"count": 3})
    assert fires.json()["name"] == "reports/daily"
    paused = await api.call("POST", "/v1/jobs/reports%2Fdaily/pause")
    assert paused.json()["spec"]["paused"] is True


async def test_pause_resume_trigger_next(api: Api) -> None:
    await create(api, "tick")
    fires = (await api.call("GET", "/v1/jobs/tick/next", params={"count": 4})).json()["fires"]
    assert len(fires) == 4
    assert [b - a for a, b in itertools.pairwise(fires)] == [60.0, 60.0, 60.0]
    paused = await api.call("POST", "/v1/jobs/tick/pause")
    assert paused.json()["spec"]["paused"] is True
    assert (await api.call("GET", "/v1/jobs/tick/next")).json()["fires"] == []
    resumed = await api.call("POST", "/v1/jobs/tick/resume")
    assert resumed.json()["spec"]["paused"] is False
    triggered = await api.call("POST", "/v1/jobs/tick/trigger")
    assert triggered.status_code == 201
    run = triggered.json()
    assert triggered.headers["location"] == f"/v1/runs/{run['id']}"
    assert (run["task"], run["job_id"]) == ("send", resumed.json()["id"])
    listed = await api.call("GET", "/v1/runs", params={"job": "tick"})
    assert [r["id"] for r in listed.json()["items"]] == [run["id"]]


async def test_pages_walk_every_job_once(api: Api) -> None:
    names = [f"job-{i:02d}" for i in range(5)]
    for name in reversed(names):
        await create(api, name)
    seen: list[str] = []
    link: str | None = "/v1/jobs?limit=2"
    while link is not None:
        body = (await api.call("GET", link)).json()
        seen += [job["spec"]["name"] for job in body["items"]]
        link = body["next"]
    assert seen == names


async def test_refusals_name_the_option(api: Api) -> None:
    await create(api, "taken")
    problem(
        await api.call("POST", "/v1/jobs", json={"name": "taken", "task": "noop", "every": 5}), 409
    )
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "j", "task": "send", "cron": "61 * * * *", "args": ["a"]}, "cron"),
        ({"name": "j", "task": "send", "every": -1, "args": ["a"]}, "every"),
        ({"name": "j", "task": "send", "every": 5, "tz": "Mars/Base", "args": ["a"]}, "tz"),
        ({"name": "j", "task": "send", "every": 5, "misfire": "later", "args": ["a"]}, "misfire"),
        ({"name": "j", "task": "send", "every": 5, "queue": "a b", "args": ["a"]}, "queue"),
        ({"name": "j", "task": "send", "every": 5}, "args"),
        ({"name": "j", "task": "send", "args": ["a"]}, "trigger"),
        ({"name": "j", "task": "send", "every": 5, "evry": 5, "args": ["a"]}, "evry"),
        ({"name": "", "task": "send", "every": 5, "args": ["a"]}, "name"),
        ({"name": "j", "every": 5}, "task"),
        ({"name": "j", "task": "send", "every": "soon", "args": ["a"]}, "every"),
    ]
    for body, field in cases:
        problem(await api.call("POST", "/v1/jobs", json=body), 422, field)
    problem(await api.call("POST", "/v1/jobs", json={"name": "j", "task": "nope", "every": 5}), 404)
    problem(await api.call("PATCH", "/v1/jobs/taken", json={}), 422, "changes")
    problem(await api.call("PATCH", "/v1/jobs/taken", json={"tz": "UTC"}), 422, "tz")
    problem(await api.call("PATCH", "/v1/jobs/nope", json={"priority": 1}), 404)
    problem(await api.call("GET", "/v1/jobs/taken/next", params={"count": 0}), 422, "count")
    listed = (await api.call("GET", "/v1/jobs")).json()["items"]
    assert [job["spec"]["name"] for job in listed] == ["taken"]
