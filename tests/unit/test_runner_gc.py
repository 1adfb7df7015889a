"""Roles move start-up objects out of the garbage collector's sight before they work."""

from __future__ import annotations

import gc

from cronbus.runner import Roles


async def test_roles_freeze_what_start_up_loaded() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        await Roles(worker=None, scheduler=None).run()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
