"""The runs pages over a real served console: search with qualifiers (kept in the URL and the
links), a bad search said above an unfiltered table, the run page with the attempts of a run a
real worker failed (traceback, log tail), cancel and retry (absent for a read-only token),
children, bulk actions that start operations, and payloads redacted for a token without them."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Sequence
from urllib.parse import parse_qs, urlsplit

from console.conftest import Console
from cronbus import App, Worker
from cronbus.model import ClaimRequest, ErrorInfo, FanOut, FanOutKind, NewRun, Outcome, QueueShare
from cronbus.services import Services
from cronbus.services import operations as ops
from cronbus.states import AttemptOutcome, RunState
from integration.test_api_support import until

ROW = re.compile(r'<tr data-run="(\d+)">')


def rows(text: str) -> list[int]:
    """The run ids of the runs table of a page, in order."""
    return [int(found) for found in ROW.findall(text)]


async def defer(console: Console, task: str, *args: object, **kwargs: object) -> int:
    """A new run of ``task`` of the console's app."""
    done = await Services(console.api.app).runs.defer(task, list(args), kwargs)
    return done.run.id


async def work(app: App, ids: Sequence[int]) -> None:
    """Run ``ids`` with a real worker of ``app`` until each has ended."""

    async def ended() -> bool:
        return all(r.state.terminal for r in await app.store.get_runs(list(ids)))

    worker = Worker(app, concurrency=2, queues="*")
    running = asyncio.create_task(worker.run())
    try:
        await until(ended, timeout=30.0)
    finally:
        worker.request_stop(hurry=True)
        await asyncio.wait_for(running, 15)


async def fail_with_logs(app: App, run_id: int, lines: int) -> None:
    """End ``run_id``'s attempt failed, with ``lines`` lines of log, as a worker reports it
    (the store's claim and complete: no row written by hand)."""
    run = await app.store.get_run(run_id)
    request = ClaimRequest(
        worker_id="w-logs",
        queues=[QueueShare(name=run.queue, limit=1)],
        limit=1,
        lease_seconds=30.0,
        namespace=run.namespace,
    )
    (claimed,) = await app.store.claim(request, app.clock.now())
    logs = "\n".join(f"log line {n}" for n in range(1, lines + 1))
    error = ErrorInfo(type="KeyError", message="'sku'", traceback="Traceback...\nKeyError: 'sku'")
    outcome = Outcome(
        run_id=run_id,
        attempt_id=claimed.attempt_id,
        outcome=AttemptOutcome.FAILED,
        error=error,
        logs=logs,
        fence=claimed.fence,
    )
    assert await app.store.complete([outcome], app.clock.now())


def value_of(text: str, element_id: str) -> str:
    """The value attribute of the element with ``element_id``."""
    found = re.search(rf'id="{element_id}"[^>]*value="([^"]*)"', text)
    assert found, f"no #{element_id} with a value"
    return html.unescape(found[1])


async def test_search_with_qualifiers_keeps_the_search_in_the_links(console: Console) -> None:
    app = console.api.app
    first = await defer(console, "send", "ada@example.org")
    second = await defer(console, "send", to="bob@example.org", subject="yo")
    failed = await defer(console, "boom")
    await work(app, [failed])
    noops = [await defer(console, "noop") for _ in range(55)]
    browser = await console.login("read")
    try:
        page = await browser.get("/runs", params={"q": "task:send"})
        assert page.status_code == 200
        assert rows(page.text) == [second, first]
        assert value_of(page.text, "q") == "task:send"
        by_kwarg = await browser.get("/runs", params={"q": 'args.to:"bob@example.org"'})
        assert rows(by_kwarg.text) == [second]
        by_position = await browser.get("/runs", params={"q": "args.0:ada@example.org task:send"})
        assert rows(by_position.text) == [first]
        dead = await browser.get("/runs", params={"q": "state:dead"})
        assert rows(dead.text) == [failed]
        assert 'class="badge s-dead"' in dead.text
        assert rows((await browser.get("/runs", params={"q": f"id:{first}"})).text) == [first]
        paged = await browser.get("/runs", params={"q": "task:noop"})
        assert rows(paged.text) == noops[::-1][:50]
        link = re.search(r'href="(/runs\?[^"]+)" rel="next"', paged.text)
        assert link, "no next page link"
        params = parse_qs(urlsplit(html.unescape(link[1])).query)
        assert params["q"] == ["task:noop"]
        live = re.search(r'id="runs-live" hx-get="([^"]+)"', paged.text)
        assert live
        assert parse_qs(urlsplit(html.unescape(live[1])).query)["q"] == ["task:noop"]
        second_page = await browser.get(html.unescape(link[1]))
        assert rows(second_page.text) == noops[::-1][50:]
        assert 'rel="next"' not in second_page.text
        assert "First page" in second_page.text
    finally:
        await browser.close()


async def test_a_bad_search_says_why_above_the_unfiltered_table(console: Console) -> None:
    run = await defer(console, "noop")
    browser = await console.login("write")
    try:
        page = await browser.get("/runs", params={"q": "state:dead nonsense"})
        assert page.status_code == 400
        assert 'id="q-error"' in page.text
        assert "words need a qualifier; say task:nonsense" in html.unescape(page.text)
        assert value_of(page.text, "q") == "state:dead nonsense"  # kept, to be fixed
        assert rows(page.text) == [run]  # the newest runs, unfiltered
        assert 'id="bulk"' not in page.text  # nothing to act on
        unknown_job = await browser.get("/runs", params={"q": "job:nope"})
        assert unknown_job.status_code == 404
        assert "no job named 'nope'" in html.unescape(unknown_job.text)
        bad_cursor = await browser.get("/runs", params={"cursor": "zzz"})
        assert bad_cursor.status_code == 400
        assert "is not a cursor of this listing" in html.unescape(bad_cursor.text)
        # htmx asks for the table alone; a bad search leaves the table as it is (no swap).
        partial = await browser.get(
            "/runs", params={"q": "task:noop"}, headers={"HX-Request": "true"}
        )
        assert partial.status_code == 200
        assert partial.text.startswith('<div id="runs-live"')
        assert "<html" not in partial.text
    finally:
        await browser.close()


async def test_the_run_page_shows_a_failed_attempt_and_its_traceback(console: Console) -> None:
    app = console.api.app
    failed = await defer(console, "boom")
    await work(app, [failed])
    browser = await console.login("read")
    try:
        page = await browser.get(f"/runs/{failed}")
        assert page.status_code == 200
        text = html.unescape(page.text)
        assert f"<h1>Run {failed}" in text
        attempts = text[text.index('id="attempts"') :]
        assert 'id="attempt-1"' in attempts
        assert 'class="badge s-failed"' in attempts
        traceback = re.search(r'<pre class="traceback">(.*?)</pre>', attempts, re.S)
        assert traceback, "no traceback"
        assert "Traceback" in traceback[1]
        assert 'raise RuntimeError("boom")' in traceback[1]
        assert "RuntimeError</strong>: boom" in text
        assert 'class="badge s-dead"' in text
        assert 'id="cancel"' not in text
        assert 'id="retry"' not in text  # read-only: no button
        assert "hx-trigger" not in text.split('id="run"')[1].split(">")[0]  # ended: not live
    finally:
        await browser.close()


async def test_the_log_tail_and_show_all(console: Console) -> None:
    app = console.api.app
    run = await defer(console, "noop")
    await fail_with_logs(app, run, 250)
    browser = await console.login("read")
    try:
        page = await browser.get(f"/runs/{run}")
        logs = re.search(r'<pre class="logs">(.*?)</pre>', page.text, re.S)
        assert logs, "no logs"
        lines = logs[1].splitlines()
        assert lines[0] == "log line 51"
        assert lines[-1] == "log line 250"
        assert len(lines) == 200
        assert "50 earlier lines not shown" in page.text
        assert f'href="/runs/{run}?logs=all#attempt-1"' in page.text
        whole = await browser.get(f"/runs/{run}", params={"logs": "all"})
        logs = re.search(r'<pre class="logs">(.*?)</pre>', whole.text, re.S)
        assert logs
        assert len(logs[1].splitlines()) == 250
        assert "KeyError" in whole.text
    finally:
        await browser.close()


async def test_cancel_and_retry_from_the_run_page(console: Console) -> None:
    run = await defer(console, "noop")
    reader = await console.login("read")
    writer = await console.login("write")
    try:
        page = await reader.get(f"/runs/{run}")
        assert 'id="cancel"' not in page.text
        assert 'hx-trigger="cb:changed from:body"' in page.text  # queued: live
        refused = await reader.post(f"/runs/{run}/cancel")
        assert refused.status_code == 403
        page = await writer.get(f"/runs/{run}")
        assert 'id="cancel"' in page.text
        assert 'id="retry"' not in page.text
        cancelled = await writer.post(f"/runs/{run}/cancel")
        assert cancelled.status_code == 303
        assert cancelled.headers["location"].startswith(f"/runs/{run}?notice=")
        after = await writer.get(cancelled.headers["location"])
        assert f"Run {run} is cancelled" in after.text
        assert 'id="retry"' in after.text
        assert 'id="cancel"' not in after.text
        again = await writer.post(f"/runs/{run}/cancel")
        assert again.status_code == 409
        assert "cannot be cancelled" in html.unescape(again.text)
        retried = await writer.post(f"/runs/{run}/retry")
        assert retried.status_code == 303
        state = (await Services(console.api.app).runs.get(run)).state
        assert state is RunState.QUEUED
        assert 'id="cancel"' in (await writer.get(f"/runs/{run}")).text
        refused_retry = await writer.post(f"/runs/{run}/retry")
        assert refused_retry.status_code == 409
        assert "only cancelled or dead runs can be retried" in html.unescape(refused_retry.text)
        missing = await writer.get("/runs/999999")
        assert missing.status_code == 404
        assert (await writer.get("/runs/abc")).status_code == 404
    finally:
        await reader.close()
        await writer.close()


async def test_a_parent_shows_its_children(console: Console) -> None:
    app = console.api.app
    now = app.clock.now()
    parent = NewRun(
        task="noop", queue="default", eta=now, fanout=FanOut(kind=FanOutKind.SHARDS, shards=25)
    )
    (made,) = await app.store.defer([parent], now)
    browser = await console.login("read")
    try:
        page = await browser.get(f"/runs/{made.id}")
        children = page.text[page.text.index('id="children"') :]
        assert 'data-count="total">25 total' in children
        assert len(rows(children)) == 20
        assert f'href="/runs/{made.id}/children"' in children
        listed = await browser.get(f"/runs/{made.id}/children")
        assert len(rows(listed.text)) == 25
        first = rows(listed.text)[0]
        child = await browser.get(f"/runs/{first}")
        assert f'href="/runs/{made.id}" id="parent-link"' in child.text
    finally:
        await browser.close()


async def test_bulk_retry_of_a_search_starts_an_operation(console: Console) -> None:
    app = console.api.app
    dead = [await defer(console, "boom") for _ in range(3)]
    await work(app, dead)
    queued = await defer(console, "noop")
    browser = await console.login("write")
    try:
        page = await browser.get("/runs", params={"q": "state:dead task:boom"})
        form = page.text[page.text.index('id="bulk"') :]
        assert 'data-confirm="Retry every dead or cancelled run matching state:dead task:boom?' in (
            html.unescape(form)
        )
        started = await browser.post("/runs/bulk", {"action": "retry", "q": "state:dead task:boom"})
        assert started.status_code == 303
        location = started.headers["location"]
        op_id = int(re.fullmatch(r"/operations/(\d+)\?notice=.*", location)[1])  # type: ignore[index]

        async def ended() -> bool:
            return (await Services(app).operations.get(op_id)).state.terminal

        await until(ended, timeout=30.0)
        shown = await browser.get(location)
        assert "retry of runs matching state:dead task:boom" in html.unescape(shown.text)
        assert '<progress id="op-progress" max="3" value="3">' in shown.text
        assert 'class="badge s-succeeded"' in shown.text
        for run_id in dead:
            assert (await app.store.get_run(run_id)).state is RunState.QUEUED
        assert (await app.store.get_run(queued)).state is RunState.QUEUED
        by_args = await browser.post("/runs/bulk", {"action": "cancel", "q": "args.0:nobody"})
        assert by_args.status_code == 303
        bad = await browser.post("/runs/bulk", {"action": "explode", "q": ""})
        assert bad.status_code == 400
        assert "action must be retry or cancel" in html.unescape(bad.text)
        unreadable = await browser.post("/runs/bulk", {"action": "retry", "q": "dead"})
        assert unreadable.status_code == 400
    finally:
        await browser.close()
        await ops.wait_all()


async def test_a_read_token_gets_no_bulk_form_and_is_refused(console: Console) -> None:
    await defer(console, "noop")
    browser = await console.login("read")
    try:
        page = await browser.get("/runs")
        assert 'id="bulk"' not in page.text
        refused = await browser.post("/runs/bulk", {"action": "cancel", "q": ""})
        assert refused.status_code == 403
    finally:
        await browser.close()


async def test_a_token_without_payloads_sees_them_redacted(console: Console) -> None:
    app = console.api.app
    run = await defer(console, "send", "ada@example.org", subject="secret subject")
    await work(app, [run])
    blind = await console.login("read", payloads=False)
    seeing = await console.login("read")
    try:
        page = html.unescape((await blind.get(f"/runs/{run}")).text)
        assert "ada@example.org" not in page
        assert "secret subject" not in page
        assert '"[redacted]"' in page
        assert page.count("[redacted]") >= 3  # positional, keyword, result (and attempt)
        searched = await blind.get("/runs", params={"q": "args.0:ada@example.org"})
        assert searched.status_code == 403
        assert "without the payloads permission" in html.unescape(searched.text)
        shown = html.unescape((await seeing.get(f"/runs/{run}")).text)
        assert "ada@example.org" in shown
        assert "secret subject ada@example.org" in shown  # the result
    finally:
        await blind.close()
        await seeing.close()
