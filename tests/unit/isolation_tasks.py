"""Functions that tests/unit/test_isolation.py runs in child processes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("isolation_tasks")


def add(a: int, b: int = 0) -> int:
    return a + b


def fail(message: str) -> None:
    raise ValueError(message)


def chatty(name: str) -> str:
    print(f"hello {name}")
    logger.warning("careful, %s", name)
    logging.getLogger("cronbus.worker").warning("not captured: the worker's own record")
    return name.upper()


def sleep_forever() -> None:
    print("going to sleep")
    threading.Event().wait()


def exit_abruptly(code: int) -> None:
    print("about to exit")
    os._exit(code)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def add_later(a: int, b: int) -> int:
    return a + b


def not_json() -> set[int]:
    return {1, 2}


def print_a_lot(count: int) -> None:
    for i in range(count):
        print(f"line {i:05d}")


class Wrapper:
    """Stands in for a cronbus Task: the function is its ``fn``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the child must call .fn, not the wrapper")


wrapped_add = Wrapper(add)


class Namespace:
    @staticmethod
    def double(x: int) -> int:
        return 2 * x


def length(text: str) -> int:
    return len(text)


def linger(value: int) -> int:
    # A non-daemon thread keeps the interpreter from exiting after the result is sent.
    threading.Thread(target=threading.Event().wait).start()
    return value


def start_grandchild(fifo: str) -> None:
    grandchild = subprocess.Popen(["sleep", "600"])
    with open(fifo, "w") as pipe:  # tells the test the grandchild's pid, and that it runs
        pipe.write(str(grandchild.pid))
    threading.Event().wait()
