"""Wake-ups between processes where Linux's abstract socket namespace is missing (macOS, BSD):
the hub falls back to a socket at a path in a private temporary folder."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cronbus.model import NewRun
from cronbus.store import SQLiteStore, open_store, wake
from cronbus.store.wake import WakeHub


async def test_a_path_socket_carries_nudges_and_is_removed_on_close() -> None:
    receiver, sender = WakeHub(abstract=False), WakeHub(abstract=False)
    try:
        listener = receiver.add(["runs"])
        folder = Path(receiver.address).parent
        assert receiver.address.startswith(os.sep)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert sender.send([receiver.address], ["runs"]) == []
        assert await listener.wait(10.0)
        assert not await listener.wait(0.0)
    finally:
        receiver.close()
    assert not folder.exists()
    # A closed hub's address is reported gone, so the store forgets its registration.
    assert sender.send([receiver.address], ["runs"]) == [receiver.address]
    sender.close()


async def test_the_sqlite_store_wakes_other_stores_without_abstract_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wake, "abstract_sockets", lambda: False)
    url = f"sqlite:///{tmp_path / 'cronbus.db'}"
    waiting, deferring = open_store(url), open_store(url)
    assert isinstance(waiting, SQLiteStore)
    await waiting.open()
    await deferring.open()
    try:
        listener = await waiting.listen(["runs"])
        address = waiting._hub.address
        assert Path(address).exists()
        run = NewRun(task="t", queue="default", eta=0.0)
        await deferring.defer([run], now=1.0)
        assert await listener.wait(10.0)
    finally:
        await waiting.close()
        await deferring.close()
    assert not Path(address).parent.exists()
