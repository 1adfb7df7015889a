"""What an operator does in the console, in a real browser against a real server: trigger a
job and watch its run succeed without reloading, read a failed run's traceback, requeue a dead
letter, pause a subscription."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from .browsing import LIVE_MS, login
from .conftest import NewPage
from .served import Server, api_json, until

pytestmark = pytest.mark.e2e


def test_a_triggered_job_run_succeeds_without_a_reload(new_page: NewPage, server: Server) -> None:
    runs = new_page()
    login(runs, server.tokens.write, "/runs?q=job:weekly_digest")
    rows = runs.locator("#runs tbody tr")
    expect(rows).to_have_count(0)  # the job fires on Mondays at 06:00: not yet
    runs.evaluate("window.sameDocument = true")

    jobs = runs.context.new_page()
    jobs.goto("/jobs")
    jobs.get_by_test_id("trigger-weekly_digest").click()
    expect(jobs.locator("p.notice")).to_be_visible()

    runs.bring_to_front()
    # The stream's tick tells the page the aggregate changed; the table fetches itself again.
    expect(rows).to_have_count(1, timeout=LIVE_MS)
    expect(rows.first.locator(".badge").first).to_have_text("succeeded", timeout=LIVE_MS)
    assert runs.evaluate("window.sameDocument") is True  # never reloaded


def test_a_failed_run_shows_its_traceback(page: Page, server: Server) -> None:
    login(page, server.tokens.read, f"/runs/{server.failed_run}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(str(server.failed_run))
    traceback = page.locator("#attempts pre.traceback").first
    expect(traceback).to_contain_text("ValueError")
    expect(traceback).to_contain_text("cannot bill the customer: card expired")


def test_a_requeued_dead_letter_leaves_the_table(page: Page, server: Server) -> None:
    page.on("dialog", lambda dialog: dialog.accept())
    login(page, server.tokens.write, "/dead-letters")
    row = page.locator(f'#dead-letters tr[data-kind=run][data-id="{server.dead_letter}"]')
    expect(row).to_have_count(1)
    row.get_by_role("button", name="Requeue").click()
    expect(page.locator("p.notice")).to_be_visible()
    expect(row).to_have_count(0)
    # Requeued for real: the charge succeeds on its second attempt, and stays out of the table.
    until(
        lambda: api_json(server, f"/runs/{server.dead_letter}")["run"]["state"] == "succeeded",
        f"run {server.dead_letter} succeeded after its requeue",
    )
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    expect(row).to_have_count(0)


def test_a_paused_subscription_says_paused(page: Page, server: Server) -> None:
    login(page, server.tokens.write, "/subscriptions/orders-to-task")
    page.locator("button#pause, #pause button").click()
    expect(page.locator("p.notice")).to_be_visible()
    expect(page.locator(".badge", has_text="paused").first).to_be_visible()
    expect(page.locator("button#resume, #resume button")).to_be_visible()
    assert api_json(server, "/subscriptions/orders-to-task")["state"] == "paused"
