"""Schemathesis over the HTTP API's own OpenAPI document, against a live ``cronbus api`` server
on loopback with a seeded store (SQLite file, then a PostgreSQL schema).

Every operation gets the valid requests of :func:`~integration.api_seed.valid_requests` (each
must succeed), Schemathesis' coverage cases (boundary, missing and mistyped values of each
input, methods the path does not allow; fewer on PostgreSQL), then random cases generated from its
schema, valid ones and invalid ones, all sent with an admin token; then, for operations with a
path parameter, cases (valid, then invalid) aimed at resources that exist (the ids and names the
seed made, in the namespace that holds them), so the run reaches past the 404s into the
handlers. Each response must not be a 5xx, and its status code, media type, headers and body
must be those the document declares; the first success of each operation is sent again without
a token and with a forged one (401), and with a token of too low a scope (403). Operations run
reads first, then changes, then deletions, so the seeded resources are still there while they
are read; then every GET runs once more over what the changes made, and each resource of
``default`` is read with a token of another namespace (404: not found, nothing leaks).

Bounded for CI: a fixed number of cases per operation, generated deterministically
(``derandomize``), so two runs send the same requests. Failures are collected, not raised
mid-run (no shrinking, every operation still runs), and the test fails listing each distinct
one with a curl command to reproduce it. The number of cases run is printed (``-s``) and
recorded as the ``schemathesis_cases`` property of the test (junit XML).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import APIOperation, GenerationMode
from schemathesis import Case as GenericCase
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err, Ok
from schemathesis.errors import InvalidSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from apps.api_app import app as api_app
from contract.pg import pg_store_url
from integration.api_seed import (
    OTHER_NAMESPACE,
    SEED_DATABASE,
    SEED_FILES,
    Seeded,
    seed,
    valid_requests,
)

TESTS = Path(__file__).resolve().parent.parent
Case = GenericCase[Any]
"""A generated (or built) request of any operation."""
Operation = APIOperation[Any, Any, Any, Any]
"""An operation of the document."""

SCALE = float(os.environ.get("CRONBUS_SCHEMATHESIS_SCALE") or 1.0)
"""Multiplies the case counts below: CI runs 1; a longer hunt by hand may run 10."""
POSITIVE_EXAMPLES = 6
"""Valid cases per operation (path parameters generated: mostly unknown resources)."""
NEGATIVE_EXAMPLES = 3
"""Invalid cases per operation (wrong types, missing fields, values out of range)."""
KNOWN_EXAMPLES = 8
"""Valid cases per operation with a path parameter, aimed at seeded resources."""
KNOWN_NEGATIVE_EXAMPLES = 3
"""Invalid cases (query, body) per operation with a path parameter, aimed at seeded resources."""
BACKEND_SHARE = {"sqlite": 0.75, "postgres": 0.5}
"""Shares of the random cases above each backend runs: the first run covers the API's own
logic, the second what differs by backend, within the suite's time (about 90 s for both)."""
COVERAGE_CASES = {"sqlite": 40, "postgres": 10}
"""Schemathesis' coverage cases per operation at most, by backend (an operation's list may hold
200), taken evenly through the list so that every input keeps some. The coverage phase gives
the boundary and missing/mistyped values of every parameter and body field systematically
(valid and invalid), and the methods a path does not allow."""

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
"""What every response is checked for."""

OPEN = {"GET /v1/health", "GET /v1/ready"}
"""The operations that need no token."""
ADMIN_ONLY = {
    "GET /v1/tokens",
    "POST /v1/tokens",
    "DELETE /v1/tokens/{token_id}",
    "POST /v1/namespaces",
    "DELETE /v1/namespaces/{name}",
}
"""The operations a ``write`` token may not use (``read`` tokens may use no other than GETs)."""

MADE_ELSEWHERE = {"st-shop"}
"""What the valid requests make in the other namespace (the seed says what it made there)."""


@dataclass
class Served:
    """A live API server over a seeded store."""

    url: str
    seeded: Seeded
    log: Path
    share: float
    """How many of the random cases this backend runs (:data:`BACKEND_SHARE`)."""
    coverage: int
    """How many coverage cases it runs per operation at most (:data:`COVERAGE_CASES`)."""

    def examples(self, count: int) -> int:
        """``count`` cases scaled for this run, at least one."""
        return max(1, round(count * SCALE * self.share))


@dataclass
class Report:
    """What a run sent and found."""

    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    operations: set[str] = field(default_factory=set)
    """Every operation sent."""
    succeeded: set[str] = field(default_factory=set)
    """The operations that answered 2xx at least once (the run got past the refusals)."""
    failures: dict[str, dict[str, str]] = field(default_factory=dict)
    """A report of each distinct failure, by operation and kind."""

    def fail(self, label: str, group: FailureGroup) -> None:
        """Keep the first report of each kind of failure (check and status) per operation."""
        found = self.failures.setdefault(label, {})
        for failure in group.exceptions:
            found.setdefault(f"{failure.code} {failure.title}", str(group))

    def fail_plain(self, label: str, message: str) -> None:
        """Keep a failure found by the test itself (not by a Schemathesis check)."""
        self.failures.setdefault(label, {}).setdefault(message, message)

    def describe(self) -> str:
        """Every distinct failure, by operation."""
        lines = [f"{sum(map(len, self.failures.values()))} distinct failures:"]
        for label, found in self.failures.items():
            for kind, message in found.items():
                lines += [f"== {label}: {kind}", message]
        return "\n".join(lines)


def _start(store: str, log: Path) -> subprocess.Popen[bytes]:
    """``cronbus api`` on a free loopback port (port 0: it announces the one it got)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        # The run sends far more than a person would; the rate limit is tested elsewhere.
        "CRONBUS_API_RATE": "10000000",
        # The operator allows what the seeded and the valid requests' connectors name.
        "CRONBUS_CONNECTOR_FILES": SEED_FILES,
        "CRONBUS_CONNECTOR_DATABASES": SEED_DATABASE,
    }
    # Every case is sent again with a forged token and with none: the limit of failed token
    # lookups per address is tested elsewhere too.
    env["CRONBUS_API_AUTH_FAILURE_BURST"] = "10000000"
    command = [sys.executable, "-m", "cronbus", "api", "--app", "apps.api_app:app"]
    command += ["--store", store, "--host", "127.0.0.1", "--port", "0", "--log-level", "WARNING"]
    with log.open("wb") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def _announced(proc: subprocess.Popen[bytes], log: Path, timeout: float = 20.0) -> str:
    """The URL the server says it listens on, once it says so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"cronbus api exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.02)  # polling a file the server writes: nothing to wait on instead
    raise AssertionError(f"cronbus api did not announce a URL in {timeout} s:\n{log.read_text()}")


def _healthy(url: str, timeout: float = 20.0) -> None:
    """Poll ``/v1/health`` until it answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"{url}/v1/health did not answer 200 within {timeout} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(params=["sqlite", "postgres"])
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Served]:
    """The API over a freshly seeded store, served by a ``cronbus api`` subprocess."""
    if request.param == "postgres":
        store = await pg_store_url(request)
    else:
        store = f"sqlite:///{tmp_path / 'api.db'}"
    api_app.use_store(store)
    async with api_app:
        seeded = await seed(api_app)
    log = tmp_path / "api.log"
    proc = _start(store, log)
    try:
        url = await asyncio.to_thread(_announced, proc, log)
        await asyncio.to_thread(_healthy, url)
        yield Served(
            url=url,
            seeded=seeded,
            log=log,
            share=BACKEND_SHARE[request.param],
            coverage=COVERAGE_CASES[request.param],
        )
    finally:
        _stop(proc)


def _operation(result: Ok[Operation] | Err[InvalidSchema]) -> Operation:
    """An operation of the document (one Schemathesis cannot read fails the run, saying why)."""
    if isinstance(result, Err):
        raise AssertionError(f"an operation of the document cannot be read: {result.err()}")
    return result.ok()


def _phase_order(label: str) -> tuple[int, str]:
    """Reads first, then changes, then deletions (and revocations), each by path."""
    method, path = label.split(" ", 1)
    if method == "GET":
        rank = 0
    elif method == "DELETE" or path.endswith("/purge"):
        rank = 2
    else:
        rank = 1
    return rank, label


def _known(seeded: Seeded, path: str) -> tuple[str, list[Any]] | None:
    """The path parameter of ``path`` and the seeded values it can take, if any."""
    names = re.findall(r"{(\w+)}", path)
    if not names:
        return None
    (name,) = names
    values: list[Any]
    if name == "name":
        if path.startswith("/v1/jobs"):
            values = list(seeded.jobs)
        elif path.startswith("/v1/subscriptions"):
            values = list(seeded.subscriptions)
        elif path.startswith("/v1/connectors"):
            values = list(seeded.connectors)
        else:
            values = list(seeded.namespaces)
    else:
        values = seeded.path_values()[name]
    return (name, values) if values else None


def _namespace_of(seeded: Seeded, value: Any) -> str:
    """The namespace of a seeded (or made) resource: requests for it name it."""
    return OTHER_NAMESPACE if value in seeded.elsewhere | MADE_ELSEWHERE else "default"


def _run_cases(
    strategy: st.SearchStrategy[Case],
    examples: int,
    send: Callable[[Case], object],
) -> None:
    """Draw ``examples`` cases (deterministically) and send each; nothing raised here stops
    the run: ``send`` records failures itself."""

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Case) -> None:
        send(case)

    # Unsatisfiable: nothing to make invalid (an operation without parameters or body).
    with contextlib.suppress(Unsatisfiable):
        run()


def _rereads(operation: Any, seeded: Seeded, created: dict[str, list[str]]) -> list[Case]:
    """Plain GETs of ``operation``: a listing in each namespace, or each known resource
    (seeded, or made by the valid requests) in its namespace."""
    known = _known(seeded, operation.path)
    if known is None:
        return [
            operation.Case(query={"namespace": namespace})
            for namespace in ("default", OTHER_NAMESPACE)
        ]
    name, values = known
    if name == "name" and operation.path.startswith("/v1/jobs"):
        values = values + created["jobs"]
    elif name == "name" and operation.path.startswith("/v1/subscriptions"):
        values = values + created["subscriptions"]
    return [
        operation.Case(
            path_parameters={name: value}, query={"namespace": _namespace_of(seeded, value)}
        )
        for value in values
    ]


def spread(items: list[Case], count: int) -> list[Case]:
    """At most ``count`` of ``items``, evenly spaced (all of them if there are no more)."""
    if len(items) <= count:
        return items
    return [items[i * len(items) // count] for i in range(count)]


class Fuzz:
    """One run over a served API: the phases of each operation, and what they found."""

    def __init__(self, served: Served, session: requests.Session) -> None:
        self.served = served
        self.session = session
        self.report = Report()
        self.auth = {"Authorization": f"Bearer {served.seeded.admin_token}"}
        # Default settings, not a schemathesis.toml someone may leave about: the same run
        # everywhere.
        self.config = schemathesis.Config()
        self.schema = schemathesis.openapi.from_url(
            f"{served.url}/openapi.json", config=self.config
        )
        self.valid = valid_requests(served.seeded, time.time())
        self.created = {
            "jobs": [r["body"]["name"] for r in self.valid["POST /v1/jobs"]],
            "subscriptions": [r["body"]["name"] for r in self.valid["POST /v1/subscriptions"]],
        }

    def run(self) -> Report:
        """Every phase of every operation, reads first; then every GET again."""
        self.schema.validate()  # a valid OpenAPI document (raises saying where it is not)
        assert not self.schema.iter_schema_warnings(), self.schema.iter_schema_warnings()
        operations = sorted(
            (_operation(result) for result in self.schema.get_all_operations()),
            key=lambda o: _phase_order(o.label),
        )
        assert len(operations) > 40, [o.label for o in operations]
        for operation in operations:
            self.valid_phase(operation)
            self.coverage_phase(operation)
            self.random_phase(operation)
            self.aimed_phase(operation)
        # Read everything again: the listings and details now hold what the changes made.
        for operation in operations:
            if operation.method.upper() == "GET":
                for case in _rereads(operation, self.served.seeded, self.created):
                    self.send(case)
                    self.check_hidden(case)
        assert not self.valid, f"valid requests for operations the document lacks: {self.valid}"
        return self.report

    def valid_phase(self, operation: Any) -> None:
        """The hand-written valid requests of ``operation``: each must succeed."""
        for request in self.valid.pop(operation.label, []):
            case = operation.Case(**request)
            status, text = self.send(case)
            if status >= 300:
                curl = case.as_curl_command()
                self.report.fail_plain(operation.label, f"refused ({status} {text}): {curl}")

    def coverage_phase(self, operation: Any) -> None:
        """Schemathesis' coverage cases of ``operation``, spread to the backend's count."""
        cases = list(
            self.schema.iter_coverage_cases(
                operation,
                generation_modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                generation_config=self.config.projects.get_default().generation,
            )
        )
        for case in spread(cases, round(self.served.coverage * SCALE)):
            self.send(case)

    def random_phase(self, operation: Any) -> None:
        """Random valid and invalid cases of ``operation`` (ids and names as generated)."""
        for mode, examples in (
            (GenerationMode.POSITIVE, POSITIVE_EXAMPLES),
            (GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES),
        ):
            strategy = operation.as_strategy(generation_mode=mode)
            _run_cases(strategy, self.served.examples(examples), self.send)

    def aimed_phase(self, operation: Any) -> None:
        """Random valid and invalid cases of ``operation`` whose path names a seeded resource,
        in the namespace that holds it."""
        known = _known(self.served.seeded, operation.path)
        if known is None:
            return
        name, values = known
        for mode, examples in (
            (GenerationMode.POSITIVE, max(KNOWN_EXAMPLES, len(values))),
            (GenerationMode.NEGATIVE, KNOWN_NEGATIVE_EXAMPLES),
        ):

            def aimed(value: Any, mode: GenerationMode = mode) -> st.SearchStrategy[Case]:
                where = _namespace_of(self.served.seeded, value)
                strategy: st.SearchStrategy[Case] = operation.as_strategy(
                    generation_mode=mode,
                    path_parameters={name: value},
                    query={"namespace": where},
                    headers={"x-cronbus-namespace": where},
                )
                return strategy

            strategy = st.sampled_from(values).flatmap(aimed)
            _run_cases(strategy, self.served.examples(examples), self.send)

    def send(self, case: Case) -> tuple[int, str]:
        """Send ``case`` with the admin token and check the answer; the first success of an
        operation is also sent with no token, a forged one and too low a scope."""
        report = self.report
        report.cases += 1
        response = case.call(base_url=self.served.url, session=self.session, headers=self.auth)
        report.statuses[response.status_code] += 1
        report.operations.add(case.operation.label)
        if response.status_code < 300 and case.operation.label not in report.succeeded:
            report.succeeded.add(case.operation.label)
            if case.operation.label not in OPEN:
                self.check_auth_enforced(case)
        try:
            case.validate_response(response, checks=CHECKS, headers=self.auth)
        except FailureGroup as group:
            report.fail(case.operation.label, group)
        return response.status_code, response.text[:500]

    def check_hidden(self, case: Case) -> None:
        """A resource of ``default`` read with a token of the other namespace only (and no
        namespace asked for): it must not be found (404), nor its existence leak (403)."""
        if not case.path_parameters or case.query.get("namespace") != "default":
            return
        del case.query["namespace"]
        self.resend(case, f"Bearer {self.served.seeded.probes[OTHER_NAMESPACE]}", 404)

    def check_auth_enforced(self, case: Case) -> None:
        """A request that succeeded, sent again without a token and with a forged one (401
        both), and with a token whose scope is too low for it (403)."""
        self.resend(case, None, 401)
        self.resend(case, "Bearer cb_000000000000_forged", 401)
        label = case.operation.label
        low = "write" if label in ADMIN_ONLY else "read" if not label.startswith("GET") else None
        if low is not None:
            self.resend(case, f"Bearer {self.served.seeded.probes[low]}", 403)

    def resend(self, case: Case, authorization: str | None, expected: int) -> None:
        """Send ``case`` again with another Authorization (None: none); the answer must be
        ``expected``."""
        request = case.as_transport_kwargs(base_url=self.served.url)
        headers = {k: v for k, v in request.pop("headers").items() if k.lower() != "authorization"}
        if authorization is not None:
            headers["Authorization"] = authorization
        answer = self.session.request(**request, headers=headers)
        self.report.cases += 1
        self.report.statuses[answer.status_code] += 1
        if answer.status_code != expected:
            shown = (authorization or "no token")[:20]
            self.report.fail_plain(
                case.operation.label,
                f"{answer.status_code} with {shown}..., not {expected}: {answer.text[:300]}",
            )


def fuzz(served: Served) -> Report:
    """Run every operation of the served document; return what was sent and found."""
    with requests.Session() as session:
        return Fuzz(served, session).run()


@pytest.mark.timeout(600)  # 30-60 s per backend; more on a loaded machine or a longer hunt
def test_schemathesis_finds_no_server_error_and_no_schema_break(
    served: Served, record_property: Callable[[str, object], None]
) -> None:
    started = time.monotonic()
    report = fuzz(served)
    took = time.monotonic() - started
    statuses = dict(sorted(report.statuses.items()))
    reached = f"{len(report.succeeded)} of {len(report.operations)} operations answered 2xx"
    print(f"\nschemathesis: {report.cases} cases in {took:.1f} s against {served.url}; {reached}")
    print(
        f"schemathesis statuses: {statuses}; no 2xx: {sorted(report.operations - report.succeeded)}"
    )
    record_property("schemathesis_cases", report.cases)
    record_property("schemathesis_statuses", statuses)
    # The run reached the handlers, not only refusals: most operations succeeded at least once.
    missed = sorted(report.operations - report.succeeded)
    assert len(report.succeeded) >= 0.75 * len(report.operations), missed
    assert report.cases > 400 * SCALE * served.share, report.cases
    assert not report.failures, report.describe() + f"\nserver log: {served.log.read_text()}"
