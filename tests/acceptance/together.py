"""Run many short ``cronbus`` commands side by side, a few at a time.

Starting thirty commands at once on a two-core machine makes each wait for the others' imports,
so a deadline per command measured from the batch's start fails on a busy machine. Here each
command gets its own deadline from the moment it starts, and at most :data:`AT_ONCE` run
together: as fast as the cores allow, and the deadline still means "this command hung".
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
AT_ONCE = 4


def finish_all(
    starters: Mapping[K, Callable[[], subprocess.Popen[str]]], timeout: float
) -> dict[K, subprocess.CompletedProcess[str]]:
    """Start each process, at most :data:`AT_ONCE` at a time, and wait for each to end (at most
    ``timeout`` seconds after its own start: then it is killed and the error raised)."""

    def finish(start: Callable[[], subprocess.Popen[str]]) -> subprocess.CompletedProcess[str]:
        process = start()
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        futures = {key: pool.submit(finish, start) for key, start in starters.items()}
        return {key: future.result() for key, future in futures.items()}
