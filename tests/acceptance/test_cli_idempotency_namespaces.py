"""Acceptance: ``cronbus defer --idempotency-key`` keeps a key per namespace, on each store. A
key that namespace ``a`` holds makes a run of ``b``'s own in ``b``, which ``b`` can show, and a
repeat in either namespace returns that namespace's run."""

from __future__ import annotations

import os
from pathlib import Path

from acceptance.test_cli import APP_SOURCE, Cli


def test_defer_keys_are_per_namespace(tmp_path: Path, each_store_url: str) -> None:
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONBUS_") and k != "COLUMNS"}
    cli = Cli(tmp_path, each_store_url, env)
    defer = ("defer", "add", "--app", "myapp", "--args", "[1, 2]", "--idempotency-key", "k")

    mine = cli.json(*defer, "--namespace", "a")
    theirs = cli.json(*defer, "--namespace", "b")

    assert mine["created"]
    assert theirs["created"]
    assert theirs["id"] != mine["id"]
    shown = cli.json("runs", "show", str(theirs["id"]), "--namespace", "b")
    assert (shown["id"], shown["task"]) == (theirs["id"], "add")
    assert cli.json(*defer, "--namespace", "b") == {**theirs, "created": False}
    assert cli.json(*defer, "--namespace", "a") == {**mine, "created": False}
