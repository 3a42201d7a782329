"""Conversation history in an SQLite file, safe to share between processes.

The file runs in WAL mode with ``synchronous=FULL``: readers never wait for writers, and a batch
that was acknowledged survives a crash. Writers take the lock up front (``BEGIN IMMEDIATE``) and
wait for it up to ``busy_timeout``; a write that still finds the file locked is retried with
backoff, a bounded number of times, so "database is locked" never reaches the caller under
ordinary contention.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from daimon.core import errors
from daimon.core.errors import BuilderError, DaimonError
from daimon.core.ids import check_id
from daimon.core.messages import Message
from daimon.core.optional import require
from daimon.kit.lifecycle import SetupOnEnter
from daimon.kit.memory_records import decode_message, encode_message

aiosqlite = require("aiosqlite", extra="sqlite")

__all__ = ("SQLiteMemory",)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID
"""
_ATTEMPTS = 12
"""Tries of one operation that keeps finding the file locked, each waiting up to busy_timeout."""
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _BUSY
    return "locked" in str(exc) or "busy" in str(exc)


class SQLiteMemory(SetupOnEnter):
    """Keeps every session's full history in an SQLite file.

    One table, ``messages(session_id, seq, payload)``, where ``payload`` is the message as
    versioned JSON. The schema is created by :meth:`setup`, or on first use. A handle holds one
    connection; close it with :meth:`aclose` or ``async with``.

    Args:
        path: The database file (created if missing), or ``":memory:"``.
        busy_timeout: Seconds a write waits for another writer's lock before retrying.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0) -> None:
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)):
            raise BuilderError(f"busy_timeout must be a number of seconds, got {busy_timeout!r}")
        if not 0 < busy_timeout < float("inf"):
            raise BuilderError(f"busy_timeout must be positive, got {busy_timeout!r}")
        self._path = os.fspath(path)
        self._busy_timeout = float(busy_timeout)
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    async def setup(self) -> None:
        """Open the file and create the schema if it is missing; safe to call again."""
        async with self._lock:
            await self._connection()

    async def aclose(self) -> None:
        """Close the connection; safe to call again. The handle cannot be used afterwards."""
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()

    async def get_messages(self, session_id: str) -> list[Message]:
        """The session's messages, oldest first."""
        check_id("session", session_id)
        rows = await self._run(
            lambda c: c.execute_fetchall(
                "SELECT seq, payload FROM messages WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ),
            write=False,
        )
        return [decode_message(session_id, seq, payload) for seq, payload in rows]

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages to the session in one transaction: all of them or none."""
        check_id("session", session_id)
        payloads = [encode_message(m) for m in messages]  # encode all before writing any
        if not payloads:
            return

        async def append(conn: Any) -> None:
            rows = await conn.execute_fetchall(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
            )
            last = int(next(iter(rows))[0])
            await conn.executemany(
                "INSERT INTO messages (session_id, seq, payload) VALUES (?, ?, ?)",
                [(session_id, last + i, p) for i, p in enumerate(payloads, start=1)],
            )

        await self._run(append, write=True)

    async def clear(self, session_id: str) -> None:
        """Forget the session."""
        check_id("session", session_id)
        await self._run(
            lambda c: c.execute("DELETE FROM messages WHERE session_id = ?", (session_id,)),
            write=True,
        )

    async def list_sessions(self) -> list[str]:
        """Ids of the sessions that have messages, sorted."""
        rows = await self._run(
            lambda c: c.execute_fetchall(
                "SELECT DISTINCT session_id FROM messages ORDER BY session_id"
            ),
            write=False,
        )
        return [str(row[0]) for row in rows]

    async def _connection(self) -> Any:
        """The open connection, opened and set up on first use; call with the lock held."""
        if self._closed:
            raise DaimonError(f"SQLiteMemory({self._path!r}) is closed")
        if self._conn is None:
            pending = aiosqlite.connect(
                self._path, timeout=self._busy_timeout, isolation_level=None
            )
            # aiosqlite's worker thread is not a daemon: a program that never closed the memory
            # would hang at exit. Each write is one committed transaction (WAL, synchronous=FULL),
            # so ending the thread with the interpreter loses nothing that was acknowledged.
            worker = getattr(pending, "_thread", pending)
            if isinstance(worker, threading.Thread) and not worker.is_alive():
                worker.daemon = True
            conn = await pending
            try:
                await conn.execute(f"PRAGMA busy_timeout = {round(self._busy_timeout * 1000)}")
                await self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
                await conn.execute("PRAGMA synchronous = FULL")
                await self._retry(lambda: conn.execute(_SCHEMA))
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _run(self, work: Callable[[Any], Awaitable[T]], *, write: bool) -> T:
        """Run ``work`` on the connection, in a write transaction when ``write``."""
        async with self._lock:
            conn = await self._connection()
            if not write:
                return await self._retry(lambda: work(conn))

            async def transaction() -> T:
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    result = await work(conn)
                    await conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        await conn.execute("ROLLBACK")
                    raise
                return result

            return await self._retry(transaction)

    async def _retry(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``, tried again with backoff while the file stays locked."""
        started = time.monotonic()
        delay = 0.01
        tries = 0
        while True:
            try:
                return await attempt()
            except sqlite3.OperationalError as exc:
                tries += 1
                if not _is_busy(exc):
                    raise
                if tries >= _ATTEMPTS:
                    waited = time.monotonic() - started
                    raise errors.TimeoutError(
                        waited, f"waiting for the lock on {self._path!r}"
                    ) from exc
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 1.0)
