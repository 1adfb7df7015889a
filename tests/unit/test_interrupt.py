"""Stopping attempts: the cancel token, and an exception forced into a running thread."""

from __future__ import annotations

import asyncio
import pickle
import threading

import pytest

from cronbus.worker.interrupt import (
    CancelToken,
    Interrupted,
    current_token,
    interrupt_thread,
    using_token,
)


def test_a_thread_in_a_python_busy_loop_is_interrupted() -> None:
    started = threading.Event()
    caught: list[Interrupted] = []

    def busy() -> None:
        started.set()
        try:
            while True:  # pure bytecode: no call that could notice a cancel token
                pass
        except Interrupted as exc:
            caught.append(exc)

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    assert started.wait(10)
    assert thread.ident is not None
    assert interrupt_thread(thread.ident, Interrupted) is True
    thread.join(10)
    assert not thread.is_alive()
    assert [exc.reason for exc in caught] == ["interrupted"]


def test_interrupting_an_unknown_thread_reports_false() -> None:
    assert interrupt_thread(0, Interrupted) is False  # no thread has id 0


def test_only_exception_classes_can_be_raised_in_a_thread() -> None:
    with pytest.raises(TypeError, match="exception class"):
        interrupt_thread(threading.get_ident(), Interrupted("an instance"))  # type: ignore[arg-type]


def test_a_token_wakes_a_task_waiting_in_a_thread() -> None:
    token = CancelToken()
    seen: dict[str, object] = {}

    def task() -> None:
        with using_token(token):
            seen["woken"] = current_token().wait(60)  # a join below 60 s proves it was woken
            try:
                current_token().raise_if_cancelled()
            except Interrupted as exc:
                seen["reason"] = exc.reason

    thread = threading.Thread(target=task, daemon=True)
    thread.start()
    token.cancel("timeout")
    thread.join(10)
    assert not thread.is_alive()
    assert seen == {"woken": True, "reason": "timeout"}


async def test_a_token_wakes_an_asyncio_task_through_a_callback() -> None:
    token = CancelToken()
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[str] = loop.create_future()
    token.on_cancel(lambda reason: loop.call_soon_threadsafe(woken.set_result, reason))
    canceller = threading.Thread(target=token.cancel, args=("cancelled",))
    canceller.start()
    assert await asyncio.wait_for(woken, 10) == "cancelled"
    canceller.join(10)


def test_the_first_reason_wins_and_callbacks_run_once() -> None:
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(calls.append)
    remove = token.on_cancel(lambda reason: calls.append(f"removed {reason}"))
    remove()
    assert not token.cancelled
    assert token.reason is None
    token.raise_if_cancelled()  # not cancelled: nothing happens
    token.cancel("timeout")
    token.cancel("cancelled")
    assert token.cancelled
    assert token.reason == "timeout"
    assert token.wait(0) is True
    assert calls == ["timeout"]
    token.on_cancel(calls.append)  # registered after the cancel: called at once
    assert calls == ["timeout", "timeout"]
    with pytest.raises(Interrupted, match="timeout"):
        token.raise_if_cancelled()


def test_a_failing_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    token = CancelToken()
    calls: list[str] = []

    def broken(reason: str) -> None:
        raise RuntimeError("broken callback")

    token.on_cancel(broken)
    token.on_cancel(calls.append)
    token.cancel("cancelled")
    assert calls == ["cancelled"]
    assert "a cancel callback failed" in caplog.text


def test_outside_an_attempt_the_current_token_is_never_cancelled() -> None:
    outside = current_token()
    outside.cancel("cancelled")  # a fresh token each time: this affects nothing
    assert not current_token().cancelled
    assert current_token().wait(0) is False
    token = CancelToken()
    with using_token(token):
        assert current_token() is token
    assert current_token() is not token


def test_interrupted_keeps_its_reason_through_pickling() -> None:
    exc = pickle.loads(pickle.dumps(Interrupted("timeout")))
    assert isinstance(exc, Interrupted)
    assert exc.reason == "timeout"
    assert str(exc) == "timeout"
