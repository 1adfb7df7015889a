"""Command lines for the property tests: what a user might type, run in-process, and the
list and show commands that must still work afterwards."""

from __future__ import annotations

import json
from datetime import datetime

from click.testing import CliRunner, Result
from hypothesis import strategies as st

from cronbus.cli import cronbus as cli

from .values import GOOD, Fields, texts


def json_text(draw: Fields, kind: str) -> str:
    """JSON a user might type: an encoded value (NaN, stringified keys...) or any text."""
    if draw.pick("json", "text") == "text":
        return str(draw("json text", "text"))
    if kind == "list":
        return _dumps(draw.list("payload", 3))
    if kind == "dict":
        return _dumps({draw("key", "text"): draw("value", "payload") for _ in range(2)})
    return _dumps(draw("json", "payload"))


def _dumps(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def text_of(value: object) -> str:
    """A generated value as the text a user would type for it."""
    if isinstance(value, datetime):
        return value.isoformat()
    return value if isinstance(value, str) else repr(value)


def cli_args(module: str, data: st.DataObject) -> list[str]:
    """One command line a user might type, with generated values."""
    draw = Fields(data)

    def option(flag: str, kind: str) -> list[str]:
        """``[FLAG, VALUE]`` or nothing: each option is given or left out."""
        if not data.draw(st.booleans(), label=f"give {flag}"):
            return []
        return [flag, text_of(draw(flag, kind))]

    command = draw.pick("defer", "publish", "job", "job_change", "subscribe", "inspect")
    if command == "inspect":
        return inspect_args(draw, data)
    if command == "defer":
        return [
            "defer",
            draw.pick("add", "anything"),
            "--app",
            module,
            "--args",
            json_text(draw, "list"),
            *(["--kwargs", json_text(draw, "dict")] if data.draw(st.booleans()) else []),
            *option("--delay", "seconds"),
            *option("--priority", "priority"),
            *option("--queue", "name"),
            *option("--idempotency-key", "text"),
        ]
    if command == "publish":
        return [
            "events",
            "publish",
            data.draw(st.just("t") | GOOD["name"] | texts, label="topic"),
            "--type",
            text_of(draw("--type", "type")),
            *(["--data", json_text(draw, "any")] if data.draw(st.booleans()) else []),
            *option("--source", "source"),
            *option("--subject", "text"),
            *option("--id", "id"),
            *option("--key", "text"),
        ]
    if command in ("job", "job_change"):
        trigger = draw.pick("every", "after", "cron", "at")
        kind = {"every": "seconds", "after": "seconds"}.get(trigger, trigger)
        schedule = [f"--{trigger}", text_of(draw(trigger, kind))]
        if command == "job_change":
            name = data.draw(st.sampled_from(["tick", "j1"]) | texts, label="job")
            if data.draw(st.booleans(), label="remove"):
                force = ["--force"] if data.draw(st.booleans(), label="--force") else []
                return ["jobs", "remove", name, *force]
            return ["jobs", "update", name, "--app", module, *schedule, "--force"]
        return [
            "jobs",
            "add",
            text_of(draw("job name", "name")),
            "--app",
            module,
            "--task",
            "anything",
            *schedule,
            *(["--args", json_text(draw, "list")] if data.draw(st.booleans()) else []),
            *option("--jitter", "seconds"),
            *option("--priority", "priority"),
        ]
    return [
        "subs",
        "add",
        text_of(draw("subscription name", "name")),
        "--topic",
        data.draw(st.just("t") | GOOD["name"] | texts, label="--topic"),
        "--task",
        "anything",
        *option("--types", "type"),
        *option("--subject", "text"),
    ]


def inspect_args(draw: Fields, data: st.DataObject) -> list[str]:
    """A command that reads or changes one thing named by a typed value."""
    ident = data.draw(
        st.sampled_from(["1", "2", "0", "-1", "9223372036854775807", "99999999999999999999"])
        | texts
    )
    name = data.draw(st.sampled_from(["tick", "j1", "t"]) | texts, label="name")
    number = text_of(draw("number", "seconds"))
    return data.draw(
        st.sampled_from(
            [
                ["runs", "show", ident],
                ["runs", "cancel", ident],
                ["runs", "retry", ident],
                ["runs", "list", "--task", name, "--queue", name, "--limit", ident],
                ["runs", "list", "--state", name, "--before", ident],
                ["jobs", "show", name],
                ["jobs", "next", name, "-n", ident],
                ["jobs", "pause", name],
                ["jobs", "resume", name],
                ["jobs", "trigger", name, "--app", "x"],
                ["events", "tail", name, "--from", ident],
                ["events", "tail", name, "--last", ident, "--json"],
                ["events", "retention", name, "--max-age", number],
                ["subs", "show", name],
                ["subs", "replay", name, "--from", ident],
                ["subs", "deliveries", name, "--limit", ident],
                ["dlq", "list", "--limit", ident],
                ["workers", "list", "--state", name],
            ]
        ),
        label="inspect",
    )


def invoke(args: list[str], store: str) -> Result:
    """Run ``cronbus ARGS --store STORE`` in-process."""
    return CliRunner().invoke(cli, [*args, "--store", store], catch_exceptions=True)


def check_result(result: Result, args: list[str]) -> bool:
    """Success, or one ``error:`` line with status 1 and no traceback; True on success."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"cronbus {args!r} raised {result.exception!r}") from (
            result.exception
        )
    if result.exit_code == 0:
        return True
    lines = result.stderr.splitlines()
    assert result.exit_code == 1, (args, result.exit_code, result.stderr)
    assert len(lines) == 1, (args, result.stderr)
    assert lines[0].startswith("error: "), (args, result.stderr)
    return False


# -- afterwards: every list and show command -----------------------------------------------------
def check_listings(store: str, module: str) -> int:
    """Run every list and show command of the store; all must succeed. Returns how many ran."""
    every = ["--limit", "1000000"]  # the whole store, not the newest page
    commands: list[list[str]] = [
        ["runs", "list", *every],
        ["runs", "list", "--json", *every],
        ["jobs", "list"],
        ["jobs", "list", "--json"],
        ["events", "topics"],
        ["subs", "list"],
        ["subs", "list", "--json"],
        ["dlq", "list", *every],
        ["workers", "list"],
    ]
    runs = json.loads(invoke(["runs", "list", "--json", *every], store).stdout)
    shown = runs[:20] + runs[20:][-20:]  # the newest and the oldest: show costs a call each
    commands += [["runs", "show", str(run["id"])] for run in shown]
    commands += [["runs", "show", str(run["id"]), "--json"] for run in shown]
    jobs = json.loads(invoke(["jobs", "list", "--json"], store).stdout)
    commands += [["jobs", "show", job["name"]] for job in jobs]
    commands += [["jobs", "next", job["name"]] for job in jobs]
    topics = json.loads(invoke(["events", "topics", "--json"], store).stdout)
    for topic in topics:
        name = topic["name"]
        whole = ["--from", "1"]
        commands += [["events", "tail", name, *whole], ["events", "tail", name, "--json", *whole]]
    subs = json.loads(invoke(["subs", "list", "--json"], store).stdout)
    commands += [["subs", "show", sub["name"]] for sub in subs]
    for args in commands:
        result = invoke(args, store)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.exception,
        )
        assert result.exit_code == 0, (args, result.stderr)
    assert runs or jobs, "the generated calls stored nothing: the test proves too little"
    return len(commands)
