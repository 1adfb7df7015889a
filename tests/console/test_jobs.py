"""The jobs pages: the table with triggers, next fires and recent outcomes; one job's facts,
next fires in its zone and run history; pause, resume and trigger now; what a read-only token
sees; errors. (The HTML helpers here are used by the dead letters and workers tests too.)"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

from console.conftest import Browser, Console
from cronbus.job_specs import JobOptions
from cronbus.model import RunFilter
from cronbus.services import Services
from cronbus.states import AttemptOutcome, RunState
from integration.api_seed import _end

# -- a small DOM over the standard library's parser ------------------------------------------

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
_BLOCK = {"br", "dd", "div", "dt", "li", "p", "pre", "td", "th", "tr", "table", "form", "section"}


@dataclass
class Node:
    """An element of a page: its tag, attributes and children (elements and text)."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Its text, whitespace collapsed (blocks and cells apart, inline elements not)."""
        parts: list[str] = []
        for child in self.children:
            if isinstance(child, str):
                parts.append(child)
            else:
                parts.append(f" {child.text} " if child.tag in _BLOCK else child.text)
        return " ".join("".join(parts).split())

    def walk(self) -> list[Node]:
        """Itself and every element inside it, in document order."""
        found = [self]
        for child in self.children:
            if isinstance(child, Node):
                found += child.walk()
        return found

    def all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        """The elements inside (itself included) with ``tag`` and these attribute values
        (``class_`` for ``class``: one of its classes)."""
        wanted = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        found = []
        for node in self.walk():
            if tag is not None and node.tag != tag:
                continue
            if all(_matches(node, k, v) for k, v in wanted.items()):
                found.append(node)
        return found

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        """The only element matching (fails the test otherwise)."""
        found = self.all(tag, **attrs)
        assert len(found) == 1, f"{len(found)} elements {tag} {attrs}"
        return found[0]

    def by_id(self, id: str) -> Node:
        """The element with this id."""
        return self.one(id=id)


def _matches(node: Node, name: str, value: str) -> bool:
    if name == "class":
        return value in node.attrs.get("class", "").split()
    return node.attrs.get(name) == value


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    """A page as a tree of :class:`Node`."""
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


def change_forms(html: str) -> list[str]:
    """The actions of the POST forms of a page's content (the header's logout and namespace
    switcher left out)."""
    main = parse(html).one("main")
    return [f.attrs.get("action", "") for f in main.all("form") if f.attrs.get("method") == "post"]


def header_forms(html: str) -> list[str]:
    """The actions of every POST form of the page."""
    return [
        f.attrs.get("action", "")
        for f in parse(html).all("form")
        if f.attrs.get("method") == "post"
    ]


def iso(epoch: float) -> str:
    """The ``datetime`` attribute the pages give a time."""
    stamp = dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds")
    return stamp.replace("+00:00", "Z")


def error_of(html: str) -> str:
    """The message of an error page (or of the error above a form)."""
    return parse(html).one("main").one(class_="error").text


def notice(location: str) -> str:
    """The notice a change's redirect carries."""
    return parse_qs(urlsplit(location).query)["notice"][0]


# -- the jobs ---------------------------------------------------------------------------------


async def fill(console: Console) -> Services:
    """Jobs of the default namespace: a cron job every minute with a dead run and a queued
    one, a weekly job named with a slash in Paris time, a paused job; one of another
    namespace."""
    app = console.api.app
    services = Services(app)
    await services.jobs.create("every_minute", "noop", JobOptions(cron="* * * * *"))
    await services.jobs.create(
        "reports/weekly", "noop", JobOptions(cron="0 6 * * mon", tz="Europe/Paris")
    )
    await services.jobs.create("resting", "noop", JobOptions(every=300.0, paused=True))
    dead = await services.jobs.trigger("every_minute")
    await _end(app, dead.id, AttemptOutcome.FAILED)  # one attempt: dead
    await services.jobs.trigger("every_minute")
    await services.namespaces.create("shop")
    await services.using("shop").jobs.create("shop-sync", "noop", JobOptions(every=60.0))
    return services


async def runs_of(services: Services, name: str) -> list[tuple[int, RunState]]:
    """A job's runs, newest first, from the store."""
    job = await services.jobs.get(name)
    found = await services.app.store.list_runs(RunFilter(job_id=job.id, namespace="default"))
    return [(run.id, run.state) for run in found]


async def test_the_jobs_table_shows_triggers_state_next_fire_and_outcomes(
    console: Console,
) -> None:
    services = await fill(console)
    (queued, queued_state), (dead, dead_state) = await runs_of(services, "every_minute")
    assert (queued_state, dead_state) == (RunState.QUEUED, RunState.DEAD)
    job = await services.jobs.get("every_minute")
    assert job.next_fire_at is not None
    browser = await console.login("read", namespaces=["default"])
    try:
        response = await browser.get("/jobs")
        assert response.status_code == 200
        doc = parse(response.text)
        table = doc.by_id("jobs")
        names = [row.attrs["data-job"] for row in table.all("tr") if "data-job" in row.attrs]
        assert names == ["every_minute", "reports/weekly", "resting"]  # not shop-sync

        row = table.one("tr", data_job="every_minute")
        assert row.one("a", href="/jobs/every_minute").text == "every_minute"
        assert row.one(class_="job-trigger").text == "cron '* * * * *' in UTC"
        assert row.one(class_="job-state").text == "active"
        assert row.one("time").attrs["datetime"] == iso(job.next_fire_at)
        # An every-minute job's next fire is under a minute away: in seconds, or in milliseconds
        # when it falls within the second (the wall clock's phase decides; issue 30).
        assert re.search(r"\bin \d+(\.\d)? m?s\b", row.one(class_="job-next").text)
        last = row.one(class_="job-last")
        assert last.one("a").attrs["href"] == f"/runs/{queued}"
        assert last.text == "queued"
        strip = row.one(class_="runs-strip").all("a")
        assert [a.attrs["href"] for a in strip] == [f"/runs/{dead}", f"/runs/{queued}"]
        assert [a.attrs["class"] for a in strip] == ["s-dead", "s-queued"]

        weekly = table.one("tr", data_job="reports/weekly")
        assert weekly.one("a").attrs["href"] == "/jobs/reports/weekly"
        assert weekly.one(class_="job-trigger").text == "cron '0 6 * * mon' in Europe/Paris"
        assert "no runs yet" in weekly.one(class_="job-last").text

        resting = table.one("tr", data_job="resting")
        assert resting.one(class_="job-state").text == "paused"
        assert resting.one(class_="job-next").text == "—"
        assert 'aria-current="page">Jobs' in response.text
    finally:
        await browser.close()


async def test_a_read_only_token_sees_no_change_button(console: Console) -> None:
    await fill(console)
    browser = await console.login("read", namespaces=["default"])
    try:
        for path in ("/jobs", "/jobs/every_minute", "/jobs/reports/weekly"):
            html = (await browser.get(path)).text
            assert change_forms(html) == [], path
            assert sorted(header_forms(html)) == ["/logout", "/namespace"], path
            assert 'data-testid="trigger-' not in html
            assert not parse(html).one("main").all("button")
        refused = await browser.post("/jobs/every_minute/trigger", {"next": "/jobs"})
        assert refused.status_code == 403
        assert "write" in refused.text
    finally:
        await browser.close()


async def test_a_writer_triggers_pauses_and_resumes_from_the_table(console: Console) -> None:
    services = await fill(console)
    before = await runs_of(services, "every_minute")
    browser = await console.login("write", namespaces=["default"])
    try:
        doc = parse((await browser.get("/jobs")).text)
        assert doc.one("button", data_testid="trigger-every_minute").text.startswith("Trigger now")
        assert doc.one("button", data_testid="pause-every_minute")
        assert doc.one("button", data_testid="resume-resting")
        assert not doc.all("button", data_testid="pause-resting")
        assert doc.one("button", data_testid="trigger-reports/weekly")  # a name with a slash

        triggered = await browser.post("/jobs/every_minute/trigger", {"next": "/jobs"})
        assert triggered.status_code == 303
        after = await runs_of(services, "every_minute")
        assert len(after) == len(before) + 1
        new_id, new_state = after[0]
        assert new_state is RunState.QUEUED
        location = triggered.headers["location"]
        assert location.startswith(f"/jobs?triggered={new_id}&")
        assert notice(location) == f"Triggered every_minute: run {new_id}"
        shown = parse((await browser.get(location)).text)
        assert shown.one(class_="notice").text == f"Triggered every_minute: run {new_id}"
        assert shown.by_id("triggered-run").attrs["href"] == f"/runs/{new_id}"

        paused = await browser.post("/jobs/reports/weekly/pause", {"next": "/jobs"})
        assert paused.status_code == 303
        assert notice(paused.headers["location"]) == "Paused reports/weekly"
        assert (await services.jobs.get("reports/weekly")).spec.paused
        doc = parse((await browser.get("/jobs")).text)
        assert doc.one("button", data_testid="resume-reports/weekly")
        assert doc.by_id("jobs").one("tr", data_job="reports/weekly").one(
            class_="job-state"
        ).text == ("paused")

        resumed = await browser.post("/jobs/resting/resume", {"next": "/jobs"})
        assert resumed.status_code == 303
        job = await services.jobs.get("resting")
        assert not job.spec.paused
        assert job.next_fire_at is not None
        assert notice(resumed.headers["location"]).startswith("Resumed resting: next fire ")
    finally:
        await browser.close()


async def test_a_job_page_shows_facts_next_ten_fires_in_its_zone_and_runs(
    console: Console,
) -> None:
    services = Services(console.api.app)
    zone = ZoneInfo("America/New_York")
    await services.jobs.create(
        "reports/daily",
        "send",
        JobOptions(
            cron="30 6 * * *",
            tz="America/New_York",
            args=["ops@example.com"],
            kwargs={"subject": "daily"},
            misfire="skip",
            overlap="skip",
        ),
    )
    first = await services.jobs.trigger("reports/daily")
    second = await services.jobs.trigger("reports/daily")
    planned = await services.jobs.next_fires("reports/daily", 10)
    browser = await console.login("read", namespaces=["default"])
    try:
        response = await browser.get("/jobs/reports/daily")
        assert response.status_code == 200
        doc = parse(response.text)
        assert doc.one("h1").text == "Job reports/daily"
        facts = doc.by_id("job-facts").text
        for expected in ("send", "emails", "skip", "America/New_York"):
            assert expected in facts
        assert doc.by_id("job-trigger").text == "cron '30 6 * * *' in America/New_York"
        assert doc.by_id("job-tz").text == "America/New_York"
        assert '"ops@example.com"' in doc.by_id("job-args").text
        assert '"subject": "daily"' in doc.by_id("job-kwargs").text

        fires = doc.by_id("next-fires").all("li")
        assert len(fires) == 10
        ats = [float(li.attrs["data-at"]) for li in fires]
        assert ats == sorted(ats)
        assert len(set(ats)) == 10
        assert ats == planned
        for li, at in zip(fires, ats, strict=True):
            local = dt.datetime.fromisoformat(li.attrs["data-local"])
            assert (local.hour, local.minute) == (6, 30)  # the job's wall time...
            assert local.utcoffset() == dt.datetime.fromtimestamp(at, zone).utcoffset()
            assert local.timestamp() == at  # ...of that very instant
            assert li.one("time").attrs["datetime"] == iso(at)  # and in UTC beside
            assert re.search(r"\b(EST|EDT)\b", li.text)

        rows = doc.by_id("job-runs").all("tr", data_run=str(second.id))
        assert rows
        assert rows[0].one("a").attrs["href"] == f"/runs/{second.id}"
        order = [
            tr.attrs["data-run"] for tr in doc.by_id("job-runs").all("tr") if "data-run" in tr.attrs
        ]
        assert order == [str(second.id), str(first.id)]  # newest first
        assert doc.by_id("job-all-runs").attrs["href"] == "/runs?q=job%3Areports%2Fdaily"
        live = doc.by_id("job-detail")
        assert live.attrs["hx-get"] == "/jobs/reports/daily"
        assert live.attrs["hx-trigger"] == "cb:changed from:body"
    finally:
        await browser.close()


async def test_the_live_parts_come_alone_to_htmx(console: Console) -> None:
    await fill(console)
    browser = await console.login("read", namespaces=["default"])
    try:
        headers = {"HX-Request": "true"}
        table = await browser.get("/jobs", headers=headers)
        assert table.status_code == 200
        assert table.text.lstrip().startswith('<div id="jobs-live"')
        assert "<html" not in table.text
        assert parse(table.text).by_id("jobs").all("tr", data_job="every_minute")
        detail = await browser.get("/jobs/every_minute", headers=headers)
        assert detail.text.lstrip().startswith('<div id="job-detail"')
        assert parse(detail.text).by_id("job-runs")
    finally:
        await browser.close()


async def test_a_paused_job_has_no_next_fires_and_the_table_pages(console: Console) -> None:
    services = Services(console.api.app)
    for n in range(52):
        await services.jobs.create(f"job-{n:02d}", "noop", JobOptions(every=60.0, paused=n == 0))
    browser = await console.login("read", namespaces=["default"])
    try:
        doc = parse((await browser.get("/jobs/job-00")).text)
        assert not doc.all(id="next-fires")
        assert "Paused: no fire is planned" in doc.by_id("next-fires-none").text
        first = parse((await browser.get("/jobs")).text)
        names = [tr.attrs["data-job"] for tr in first.all("tr") if "data-job" in tr.attrs]
        assert names == [f"job-{n:02d}" for n in range(50)]
        following = first.one("a", rel="next").attrs["href"]
        second = parse((await browser.get(following)).text)
        names = [tr.attrs["data-job"] for tr in second.all("tr") if "data-job" in tr.attrs]
        assert names == ["job-50", "job-51"]
        assert not second.all("a", rel="next")
        assert second.one("nav", class_="pager").one("a").attrs["href"] == "/jobs"
    finally:
        await browser.close()


async def test_a_token_without_payloads_sees_job_arguments_redacted(console: Console) -> None:
    services = Services(console.api.app)
    await services.jobs.create(
        "mailer", "send", JobOptions(every=60.0, args=["secret@example.com"])
    )
    browser = await console.login("read", namespaces=["default"], payloads=False)
    try:
        doc = parse((await browser.get("/jobs/mailer")).text)
        assert doc.by_id("job-args").text == "[redacted]"
        assert doc.by_id("job-kwargs").text == "[redacted]"
        assert "secret@example.com" not in str((await browser.get("/jobs/mailer")).text)
    finally:
        await browser.close()


async def test_bad_input_gets_an_error_page(console: Console) -> None:
    await fill(console)
    browser = await console.login("write", namespaces=["default"])
    try:
        missing = await browser.get("/jobs/nope")
        assert missing.status_code == 404
        assert error_of(missing.text) == "no job named 'nope'"
        elsewhere = await browser.get("/jobs/shop-sync")  # another namespace's job
        assert elsewhere.status_code == 404
        for action in ("pause", "resume", "trigger"):
            refused = await browser.post(f"/jobs/nope/{action}", {"next": "/jobs"})
            assert refused.status_code == 404, action
            assert error_of(refused.text) == "no job named 'nope'"
        cursor = await browser.get("/jobs?cursor=garbage")
        assert cursor.status_code == 400
        assert "cursor" in error_of(cursor.text)
        offsite = await browser.post("/jobs/every_minute/pause", {"next": "https://evil.example/"})
        assert offsite.headers["location"].startswith("/jobs/every_minute?")  # never off-site
    finally:
        await browser.close()


async def test_the_strip_is_one_store_call_shared_by_tabs(console: Console) -> None:
    await fill(console)
    store = console.api.app.store
    calls: list[tuple[str, Sequence[int], int]] = []
    original = store.recent_job_runs

    async def counted(
        namespace: str, job_ids: Sequence[int], per_job: int
    ) -> dict[int, list[tuple[int, RunState]]]:
        calls.append((namespace, job_ids, per_job))
        return await original(namespace, job_ids, per_job)

    store.recent_job_runs = counted  # type: ignore[method-assign]
    try:
        tabs: list[Browser] = [
            await console.login("read", namespaces=["default"]) for _ in range(3)
        ]
        for tab in tabs:
            assert (await tab.get("/jobs")).status_code == 200
        assert len(calls) == 1  # three tabs within the cache's life: one read
        namespace, ids, per_job = calls[0]
        assert namespace == "default"
        assert len(ids) == 3
        assert per_job == 10
        for tab in tabs:
            await tab.close()
    finally:
        del store.recent_job_runs
