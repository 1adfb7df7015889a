"""PostgreSQL transactions as the store uses them: pipelined, rolled back when they fail, and
their errors told in one line."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor
from psycopg.abc import Params, QueryNoTemplate
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from . import postgres_sql as q

Row = tuple[Any, ...]
Conn = AsyncConnection[TupleRow]
Cursor = AsyncCursor[TupleRow]
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


class Tx:
    """One pipelined transaction: statements queue up and go with the next read or the commit.

    ``nudges`` are the wake-up channels to NOTIFY with the commit.
    """

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.nudges: set[str] = set()

    async def queue(self, query: QueryNoTemplate, params: Params | None = None) -> Cursor:
        """Queue a statement; read its rows later (a read forces a round trip)."""
        return await self.conn.execute(query, params)

    async def rows(self, query: QueryNoTemplate, params: Params | None = None) -> list[Row]:
        """Run a statement, with everything queued before it, and read its rows now."""
        return await (await self.conn.execute(query, params)).fetchall()


async def stopped(awaitable: Awaitable[object]) -> None:
    """Await something whose tasks were cancelled, without swallowing our own cancellation."""
    try:
        await awaitable
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


async def rollback(conn: Conn) -> None:
    """End a failed transaction, unless the connection is gone (the pool then drops it)."""
    if conn.closed or conn.info.transaction_status not in _IN_TRANSACTION:
        return
    with contextlib.suppress(psycopg.Error):
        await conn.execute(q.ROLLBACK)


def describe(exc: psycopg.Error) -> str:
    """The first line of a psycopg error, with its SQLSTATE when the server sent one."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return f"{line} (SQLSTATE {exc.sqlstate})" if exc.sqlstate else line
