"""The operations pages over a real served console: the list, one operation with its progress
and who started it, live while it runs, and abort (a writer's button; refused to a reader)."""

from __future__ import annotations

import html
import re

from console.conftest import Console
from console.test_runs import defer
from cronbus.admin_records import OperationState
from cronbus.services import Services
from cronbus.services import operations as ops
from cronbus.states import RunState
from integration.test_api_support import until


async def running_operation(console: Console, total: int, done: int) -> int:
    """An operation that a runner of another process is working through: running, ``done``
    of ``total`` items handled (made with the store's own calls)."""
    store = console.api.app.store
    now = console.api.app.clock.now()
    op = await store.put_operation(
        namespace="default",
        kind="runs.cancel",
        request={"filter": {"states": ["queued"]}},
        created_by="elsewhere",
        now=now,
    )
    await store.update_operation(op.id, now, state=OperationState.RUNNING, total=total, done=done)
    return op.id


async def test_an_operation_shows_its_progress_and_who_started_it(console: Console) -> None:
    ids = [await defer(console, "noop") for _ in range(4)]
    browser = await console.login("write")
    try:
        started = await browser.post("/runs/bulk", {"action": "cancel", "q": "task:noop"})
        assert started.status_code == 303
        found = re.fullmatch(r"/operations/(\d+)\?notice=.*", started.headers["location"])
        assert found
        op_id = int(found[1])
        app = console.api.app

        async def ended() -> bool:
            return (await Services(app).operations.get(op_id)).state.terminal

        await until(ended, timeout=30.0)
        page = await browser.get(f"/operations/{op_id}")
        assert page.status_code == 200
        assert '<progress id="op-progress" max="4" value="4">' in page.text
        assert 'id="op-done">4<' in page.text
        assert 'id="op-failed">0<' in page.text
        assert 'class="badge s-succeeded"' in page.text
        record = await Services(app).operations.get(op_id)
        assert f'id="op-by">{record.created_by}<' in page.text
        assert record.created_by != "local"  # the console's token started it
        assert 'id="abort"' not in page.text  # it ended
        assert "hx-trigger" not in page.text.split('id="operation"')[1].split(">")[0]
        assert '"task": "noop"' in html.unescape(page.text)  # the request
        for run_id in ids:
            assert (await app.store.get_run(run_id)).state is RunState.CANCELLED
        audit = await Services(app).audit.list()
        assert any(e.action == "operations.runs.cancel" for e in audit.items)
        listed = await browser.get("/operations")
        assert f'<tr data-operation="{op_id}">' in listed.text
        assert "4 done of 4" in listed.text
        assert 'id="operations-live" hx-get="/operations"' in listed.text
    finally:
        await browser.close()
        await ops.wait_all()


async def test_a_running_operation_is_live_and_can_be_aborted(console: Console) -> None:
    op_id = await running_operation(console, total=10, done=3)
    reader = await console.login("read")
    writer = await console.login("write")
    try:
        page = await reader.get(f"/operations/{op_id}")
        assert '<progress id="op-progress" max="10" value="3">' in page.text
        assert 'class="badge s-running"' in page.text
        assert 'hx-trigger="cb:changed from:body"' in page.text
        assert 'id="op-by">elsewhere<' in page.text
        assert 'id="abort"' not in page.text
        refused = await reader.post(f"/operations/{op_id}/abort")
        assert refused.status_code == 403
        page = await writer.get(f"/operations/{op_id}")
        assert 'id="abort"' in page.text
        assert "data-confirm=" in page.text.split('id="abort"')[1].split(">")[0]
        aborted = await writer.post(f"/operations/{op_id}/abort")
        assert aborted.status_code == 303
        after = await writer.get(aborted.headers["location"])
        assert f"Operation {op_id} is aborted" in html.unescape(after.text)
        assert 'class="badge s-aborted"' in after.text
        assert 'id="abort"' not in after.text
        state = (await Services(console.api.app).operations.get(op_id)).state
        assert state is OperationState.ABORTED
        again = await writer.post(f"/operations/{op_id}/abort")
        assert again.status_code == 303  # an ended operation is left as it is
        assert (await writer.get("/operations/424242")).status_code == 404
        assert (await writer.get("/operations/x")).status_code == 404
    finally:
        await reader.close()
        await writer.close()


async def test_the_list_pages_and_is_empty_at_first(console: Console) -> None:
    browser = await console.login("read")
    try:
        empty = await browser.get("/operations")
        assert 'id="no-operations"' in empty.text
        made = [await running_operation(console, total=1, done=0) for _ in range(55)]
        first = await browser.get("/operations")
        shown = [int(i) for i in re.findall(r'<tr data-operation="(\d+)">', first.text)]
        assert shown == made[::-1][:50]
        link = re.search(r'href="(/operations\?cursor=[^"]+)" rel="next"', first.text)
        assert link
        second = await browser.get(html.unescape(link[1]))
        rest = [int(i) for i in re.findall(r'<tr data-operation="(\d+)">', second.text)]
        assert rest == made[::-1][50:]
        bad = await browser.get("/operations", params={"cursor": "nope"})
        assert bad.status_code == 400
    finally:
        await browser.close()
