"""The overview page (``GET /``) over real HTTP: its cards show the namespace's figures once
runs exist, the chart draws the runs that ended, the queue depths table counts each queue, the
window switch, the htmx refresh of the live part, and the refusals."""

from __future__ import annotations

import re
from html import unescape

from console.conftest import Console
from cronbus.job_specs import JobOptions
from cronbus.model import ClaimRequest, QueueShare, WorkerInfo
from cronbus.services import Services
from cronbus.services.stats import CACHE
from cronbus.states import AttemptOutcome
from cronbus.store.logic import job_run
from integration.api_seed import WORKER_ID
from integration.test_services_fixtures import end_run

FIGURE = re.compile(r'data-figure="(\w+)">([^<]*)<')


def shown(html: str) -> dict[str, str]:
    """The page's figures by ``data-figure`` name."""
    return {name: unescape(value) for name, value in FIGURE.findall(html)}


def element(html: str, element_id: str) -> str:
    """The text from the element with ``element_id`` to the end of the page."""
    start = html.find(f'id="{element_id}"')
    assert start >= 0, f"no element #{element_id}"
    return html[start:]


async def fill(console: Console) -> None:
    """Runs of ``default``: two queued in ``default``, one in ``emails``, one running, one
    succeeded and one dead (each driven by the store as a worker would drive it)."""
    services = Services(console.api.app)
    for _ in range(2):
        await services.runs.defer("noop")
    await services.runs.defer("send", ["a@example.com"])
    running = (await services.runs.defer("noop", queue="busy")).run.id
    request = ClaimRequest(
        worker_id=WORKER_ID, queues=[QueueShare(name="busy", limit=1)], limit=1, lease_seconds=60
    )
    (claimed,) = await console.api.app.store.claim(request, console.api.app.clock.now())
    assert claimed.run_id == running
    ok = (await services.runs.defer("noop", queue="done")).run.id
    await end_run(console.api.app, ok, AttemptOutcome.SUCCEEDED)
    dead = (await services.runs.defer("boom", queue="broken")).run.id
    await end_run(console.api.app, dead, AttemptOutcome.FAILED)
    CACHE.clear()


async def test_the_cards_chart_and_queues_show_the_namespaces_runs(console: Console) -> None:
    await fill(console)
    browser = await console.login("admin")
    try:
        response = await browser.get("/")
    finally:
        await browser.close()
    assert response.status_code == 200
    html = response.text
    figures = shown(html)
    assert figures["runs_running"] == "1"
    assert figures["runs_queued"] == "3"
    assert figures["dead_letters"] == "1"
    assert figures["workers_alive"] == "0"
    assert figures["subscriptions_failing"] == "0"
    assert figures["scheduler_lag"] == "—"
    chart = element(html, "chart")
    assert chart.count('<g class="bar"') == 60
    assert 'class="s-succeeded"' in chart.split("</svg>")[0]
    assert 'class="s-dead"' in chart.split("</svg>")[0]
    assert "In all: 1 succeeded, 1 dead." in chart
    table = element(html, "chart-table").split("</table>")[0]
    assert table.count("<tr>") == 2  # the header and the one minute with runs
    queues = element(html, "queues").split("</table>")[0]
    rows = dict(re.findall(r'data-queue="([^"]+)">(.*?)</tr>', queues, re.S))
    assert set(rows) == {"default", "emails", "busy"}
    assert re.search(r'data-state="queued">2<', rows["default"])
    assert re.search(r'data-state="running">1<', rows["busy"])
    assert "due " in rows["emails"]
    assert ">queued</th>" in queues


async def test_a_day_window_draws_quarter_hours(console: Console) -> None:
    browser = await console.login("read")
    try:
        response = await browser.get("/?window=86400")
    finally:
        await browser.close()
    assert response.status_code == 200
    chart = element(response.text, "chart")
    assert 'data-window="86400"' in chart
    assert chart.count('<g class="bar"') in (96, 97)  # the ends may be partial quarters
    assert "Runs ended per 15 minutes by outcome, last day (UTC)" in chart
    assert 'data-testid="window-86400" aria-current="true"' in response.text
    # The live part refetches the same window.
    assert 'hx-get="/?window=86400"' in response.text


async def test_a_window_not_offered_is_refused_with_a_page(console: Console) -> None:
    browser = await console.login("admin")
    try:
        for bad in ("60", "day", "-3600"):
            response = await browser.get(f"/?window={bad}")
            assert response.status_code == 400, bad
            assert "window must be one of 3600, 86400" in response.text
            assert "text/html" in response.headers["content-type"]
    finally:
        await browser.close()


async def test_an_htmx_refresh_gets_only_the_live_part(console: Console) -> None:
    browser = await console.login("admin")
    try:
        response = await browser.get("/", headers={"HX-Request": "true"})
    finally:
        await browser.close()
    assert response.status_code == 200
    assert response.text.startswith('<div id="overview-live"')
    assert "<html" not in response.text
    assert 'id="chart"' in response.text
    assert 'id="queues"' in response.text


async def test_a_read_only_token_sees_the_overview_with_nothing_to_change(
    console: Console,
) -> None:
    await fill(console)
    browser = await console.login("read", ["default"])
    try:
        response = await browser.get("/")
    finally:
        await browser.close()
    assert response.status_code == 200
    assert shown(response.text)["runs_queued"] == "3"
    forms = re.findall(r'<form[^>]*action="([^"]+)"', response.text)
    assert sorted(forms) == ["/logout", "/namespace"]


async def test_the_overview_of_another_namespace_counts_its_own_runs(console: Console) -> None:
    await fill(console)
    services = Services(console.api.app)
    await services.namespaces.create("shop")
    await services.using("shop").runs.defer("noop")
    browser = await console.login("admin")
    try:
        response = await browser.get("/?ns=shop")
    finally:
        await browser.close()
    figures = shown(response.text)
    assert (figures["runs_queued"], figures["dead_letters"]) == ("1", "0")


async def test_a_worker_and_a_late_fire_reach_their_cards(console: Console) -> None:
    app = console.api.app
    now = app.clock.now()
    await app.store.register_worker(
        WorkerInfo(
            id=WORKER_ID,
            host="h",
            pid=1,
            queues=["default"],
            concurrency=1,
            version="t",
            started_at=now,
            heartbeat_at=now,
        )
    )
    await Services(app).jobs.create("tick", "noop", JobOptions(every=60.0))
    job = await app.store.get_job("tick")
    await app.store.defer([job_run(job, now - 2.5, now)], now)
    CACHE.clear()
    browser = await console.login("admin")
    try:
        figures = shown((await browser.get("/")).text)
    finally:
        await browser.close()
    assert figures["workers_alive"] == "1"
    assert figures["scheduler_lag"] == "2.5 s"
    assert figures["scheduler_lag_samples"] == "1"


async def test_no_session_is_sent_to_the_login_page(console: Console) -> None:
    response = await console.api.client.get("/?window=3600")
    assert response.status_code == 303
    assert response.headers["location"].startswith("/login?next=/")
