"""Purging runs through the HTTP API and the Python services: counts, states, the admin scope,
and each refusal as a problem naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from cronbus.client import RemoteServices
from cronbus.errors import ForbiddenError, InvalidArgumentError
from cronbus.model import ClaimRequest, Outcome, QueueShare
from cronbus.services import Services
from cronbus.services.access import Access, Scope
from cronbus.states import AttemptOutcome
from cronbus.states import RunState as S
from integration.test_api_support import Api, api, problem

__all__ = ["api"]


async def finished_runs(api: Api, count: int) -> list[int]:
    """``count`` runs of ``noop``, claimed and succeeded by hand."""
    ids = []
    for _ in range(count):
        response = await api.call("POST", "/v1/runs", json={"task": "noop"})
        assert response.status_code == 201, response.text
        ids.append(response.json()["run"]["id"])
    store, now = api.app.store, api.app.clock.now()
    request = ClaimRequest(
        worker_id="w",
        queues=[QueueShare(name="default", limit=count)],
        limit=count,
        lease_seconds=30,
    )
    claimed = await store.claim(request, now)
    await store.complete(
        [
            Outcome(run_id=c.run_id, attempt_id=c.attempt_id, outcome=AttemptOutcome.SUCCEEDED)
            for c in claimed
        ],
        now,
    )
    return ids


async def test_purge_removes_finished_runs_and_keeps_live_ones(api: Api) -> None:
    done = await finished_runs(api, 3)
    live = (await api.call("POST", "/v1/runs", json={"task": "send", "args": ["a@x"]})).json()
    response = await api.call("POST", "/v1/runs/purge", json={"older_than": 0, "limit": 2})
    assert response.status_code == 200, response.text
    first = response.json()
    assert (first["removed"], first["done"]) == (2, False)
    assert first["states"] == ["cancelled", "dead", "skipped", "succeeded"]
    again = (await api.call("POST", "/v1/runs/purge", json={"older_than": "0s"})).json()
    assert (again["removed"], again["done"]) == (1, True)
    for run_id in done:
        assert (await api.call("GET", f"/v1/runs/{run_id}")).status_code == 404
    shown = await api.call("GET", f"/v1/runs/{live['run']['id']}")
    assert shown.json()["run"]["state"] == "queued"


async def test_purge_keeps_runs_younger_than_the_age_and_other_states(api: Api) -> None:
    await finished_runs(api, 2)
    young = await api.call("POST", "/v1/runs/purge", json={"older_than": "1d"})
    assert young.json()["removed"] == 0
    dead_only = await api.call("POST", "/v1/runs/purge", json={"older_than": 0, "states": ["dead"]})
    assert dead_only.json() == {"removed": 0, "done": True, "older_than": 0.0, "states": ["dead"]}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"older_than": -1}, "older_than", "zero or more"),
        ({"older_than": "soon"}, "older_than", "must be an age"),
        ({"older_than": 0, "states": ["running"]}, "states", "not finished"),
        ({"older_than": 0, "states": ["nope"]}, "states", "not a run state"),
        ({"older_than": 0, "limit": 0}, "limit", "whole number"),
    ],
)
async def test_bad_purges_are_refused_naming_the_field(
    api: Api, body: dict[str, Any], field: str, words: str
) -> None:
    response = await api.call("POST", "/v1/runs/purge", json=body)
    found = problem(response, 422, field)
    assert words in found["detail"]


async def test_purge_needs_an_admin_token(api: Api) -> None:
    response = await api.call("POST", "/v1/runs/purge", scope="write", json={"older_than": 0})
    problem(response, 403)


async def test_the_python_services_refuse_the_same(api: Api) -> None:
    services = Services(api.app)
    with pytest.raises(InvalidArgumentError, match="not finished"):
        await services.runs.purge(0, ["queued"])
    with pytest.raises(InvalidArgumentError, match="zero or more"):
        await services.runs.purge(-3)
    writer = Services(api.app, Access.of("someone", Scope.WRITE, None))
    with pytest.raises(ForbiddenError):
        await writer.runs.purge(0)
    assert (await services.runs.purge("1h")).removed == 0


async def test_the_client_purges_through_the_server_as_the_cli_does(api: Api) -> None:
    await finished_runs(api, 3)
    async with RemoteServices(api.url, await api.token()) as remote:
        first = await remote.runs.purge("0s", ["succeeded"], limit=2)
        assert (first.removed, first.done, first.states) == (2, False, (S.SUCCEEDED,))
        rest = await remote.runs.purge(0)
        assert (rest.removed, rest.done) == (1, True)
        with pytest.raises(InvalidArgumentError, match="not finished"):
            await remote.runs.purge(0, ["running"])
    async with RemoteServices(api.url, await api.token("write")) as writer:
        with pytest.raises(ForbiddenError):
            await writer.runs.purge(0)
