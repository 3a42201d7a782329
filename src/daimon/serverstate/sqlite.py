"""The server's state in an SQLite file: :class:`SQLiteStateStore`, shared by processes on one host.

Tables (versioned in ``daimon_schema_versions`` as component ``server_state``, as the PostgreSQL
stores do)::

    daimon_state_records   (kind, key) PRIMARY KEY, value, version, expires_at
    daimon_state_streams   (kind, stream) PRIMARY KEY, last_seq, floor_seq, expires_at
    daimon_state_events    (kind, stream, seq) PRIMARY KEY, value
    daimon_state_counter   one row: the last record version given

The file runs in WAL mode: readers never wait for the writer. A write that draws a version or an
event number takes the file's write lock up front (``BEGIN IMMEDIATE``), bumps the counter (or
the stream's ``last_seq``) and writes in that one transaction, so numbers are unique and in
order across every handle and process; a take is one ``DELETE ... RETURNING``. A write that finds
the file locked waits up to ``busy_timeout`` and is tried again with backoff.

SQLite has no notifications: a wait is woken at once by an append made through its own handle,
and otherwise notices another connection's commit by polling ``PRAGMA data_version`` (one
poller per handle, every 10 ms after a change, backing off to ``poll_interval``). Expired rows
read as absent and are deleted by :meth:`SQLiteStateStore.prune`, which writes call at most once
per ``prune_every`` seconds. Expiry is by the host's wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Self, TypeVar
from urllib.parse import unquote, urlsplit

from daimon.core import errors
from daimon.core.errors import BuilderError, DaimonError, SchemaVersionError
from daimon.core.optional import require
from daimon.core.state_store import (
    StateRecord,
    check_after,
    check_kind,
    check_limit,
    check_name,
    check_ttl,
    check_value,
    check_version,
    check_wait,
)
from daimon.kit.lifecycle import SetupOnEnter
from daimon.kit.sql_schema import Schema

aiosqlite = require("aiosqlite", extra="sqlite")

__all__ = ("SCHEMA", "SQLiteStateStore", "path_from_url")

T = TypeVar("T")

SCHEMA = Schema(
    component="server_state",
    steps=(
        """
        CREATE TABLE daimon_state_counter (
            id INTEGER PRIMARY KEY CHECK (id = 1), last INTEGER NOT NULL);
        INSERT INTO daimon_state_counter (id, last) VALUES (1, 0);
        CREATE TABLE daimon_state_records (
            kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
            version INTEGER NOT NULL, expires_at REAL, PRIMARY KEY (kind, key));
        CREATE INDEX daimon_state_records_expiry ON daimon_state_records (expires_at)
            WHERE expires_at IS NOT NULL;
        CREATE TABLE daimon_state_streams (
            kind TEXT NOT NULL, stream TEXT NOT NULL, last_seq INTEGER NOT NULL,
            floor_seq INTEGER NOT NULL DEFAULT 0, expires_at REAL,
            PRIMARY KEY (kind, stream)) WITHOUT ROWID;
        CREATE INDEX daimon_state_streams_expiry ON daimon_state_streams (expires_at)
            WHERE expires_at IS NOT NULL;
        CREATE TABLE daimon_state_events (
            kind TEXT NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY (kind, stream, seq))
        """,
    ),
)
"""The tables, versioned: step 1 made them."""

_VERSIONS = (
    "CREATE TABLE IF NOT EXISTS daimon_schema_versions ("
    "component TEXT PRIMARY KEY, version INTEGER NOT NULL, migrated_at REAL NOT NULL)"
)
_ALIVE = "(expires_at IS NULL OR expires_at > :now)"
_WHERE = "WHERE kind = :kind AND key = :key"
_UPSERT = (
    "INSERT INTO daimon_state_records AS r (kind, key, value, version, expires_at) "
    "VALUES (:kind, :key, :value, :version, :expires) ON CONFLICT (kind, key) DO UPDATE SET "
    "value = excluded.value, version = excluded.version, expires_at = excluded.expires_at"
)
_SQL = {
    "bump": "UPDATE daimon_state_counter SET last = last + 1 WHERE id = 1 RETURNING last",
    "put": f"{_UPSERT} RETURNING version",
    "create": f"{_UPSERT} WHERE r.expires_at <= :now RETURNING version",
    "replace": (
        "UPDATE daimon_state_records SET value = :value, version = :new, expires_at = :expires "
        f"{_WHERE} AND version = :expected AND {_ALIVE} RETURNING version"
    ),
    "read": f"SELECT value, version FROM daimon_state_records {_WHERE} AND {_ALIVE}",
    "take": f"DELETE FROM daimon_state_records {_WHERE} RETURNING value, expires_at",
    "append": (
        "INSERT INTO daimon_state_streams AS s (kind, stream, last_seq, expires_at) "
        "VALUES (:kind, :stream, 1, :expires) ON CONFLICT (kind, stream) DO UPDATE SET "
        "floor_seq = CASE WHEN s.expires_at <= :now THEN s.last_seq ELSE s.floor_seq END, "
        "last_seq = s.last_seq + 1, expires_at = excluded.expires_at "
        "RETURNING last_seq, floor_seq"
    ),
    "drop_below": (
        "DELETE FROM daimon_state_events WHERE kind = :kind AND stream = :stream AND seq <= :floor"
    ),
    "event": (
        "INSERT INTO daimon_state_events (kind, stream, seq, value) "
        "VALUES (:kind, :stream, :seq, :value)"
    ),
    "read_after": (
        "SELECT e.seq, e.value FROM daimon_state_events e JOIN daimon_state_streams s "
        "ON s.kind = e.kind AND s.stream = e.stream WHERE e.kind = :kind "
        "AND e.stream = :stream AND e.seq > :after "
        "AND (s.expires_at IS NULL OR s.expires_at > :now) ORDER BY e.seq LIMIT :limit"
    ),
    "prune_records": "DELETE FROM daimon_state_records WHERE expires_at <= :now",
    "prune_events": (
        "DELETE FROM daimon_state_events WHERE (kind, stream) IN (SELECT kind, stream "
        "FROM daimon_state_streams WHERE expires_at <= :now)"
    ),
    "prune_streams": "DELETE FROM daimon_state_streams WHERE expires_at <= :now",
}

_ATTEMPTS = 12
"""Tries of one operation that keeps finding the file locked, each waiting up to busy_timeout."""
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_POLL_FIRST = 0.01
"""Seconds between polls for another connection's commit, right after one was seen."""
_SYNC = ("OFF", "NORMAL", "FULL")


def path_from_url(url: str) -> str:
    """The file an ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL names.

    Raises:
        BuilderError: ``url`` is no ``sqlite://`` URL, names a host, or names no file (a
            database in memory is not shared, so it is refused too).
    """
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme.lower() != "sqlite":
        raise BuilderError(f"expected an sqlite:///path URL, got {url!r}")
    if parts.netloc:
        raise BuilderError(
            f"an sqlite URL names a file, not a host: {url!r}; write sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    if parts.query or parts.fragment:
        raise BuilderError(f"an sqlite URL takes no query or fragment, got {url!r}")
    path = unquote(parts.path)[1:]  # the slash after "sqlite://" only ends the empty host
    if not path or path.endswith("/") or path == ":memory:":
        raise BuilderError(
            f"the sqlite store needs a database file, got {url!r}: write sqlite:///relative.db "
            "or sqlite:////absolute/path.db (a database in memory is not shared by processes)"
        )
    return path


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _BUSY
    return "locked" in str(exc) or "busy" in str(exc)


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BuilderError(f"{name} must be a number of seconds, got {value!r}")
    if not 0 < value < float("inf"):
        raise BuilderError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def _expires(now: float, ttl: float | None) -> float | None:
    return None if ttl is None else now + ttl


class SQLiteStateStore(SetupOnEnter):
    """A :class:`~daimon.core.StateStore` in an SQLite file, shared by the processes of one host.

    Each handle holds one connection; open one per process (``daimon serve --store
    sqlite:///state.db``) and every replica on the machine shares the file. The tables are
    created by :meth:`setup`, or on first use. The file must be on a local disk: SQLite's locks
    are not to be trusted over a network file system.

    Args:
        path: The database file (created if missing).
        busy_timeout: Seconds a write waits for another writer's lock before trying again.
        poll_interval: Longest pause, in seconds, between a wait's checks for another
            connection's commit (it starts at 10 ms after a change and doubles up to this).
        prune_every: Seconds between deletions of expired rows, run by a write (``None``: only
            when :meth:`prune` is called).
        synchronous: SQLite's ``synchronous`` setting: ``"NORMAL"`` (a commit survives the
            process crashing; a power loss may lose the last ones) or ``"FULL"`` (it survives
            that too, at an fsync per write), or ``"OFF"``.

    Raises:
        BuilderError: A setting is wrong.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        poll_interval: float = 0.1,
        prune_every: float | None = 300.0,
        synchronous: str = "NORMAL",
    ) -> None:
        if not isinstance(path, (str, os.PathLike)) or os.fspath(path) in ("", ":memory:"):
            raise BuilderError(
                f"path must name a database file (a database in memory is not shared), got {path!r}"
            )
        if not isinstance(synchronous, str) or synchronous.upper() not in _SYNC:
            raise BuilderError(
                f"synchronous must be one of {', '.join(_SYNC)}, got {synchronous!r}"
            )
        self._path = os.fspath(path)
        self._busy_timeout = _seconds("busy_timeout", busy_timeout)
        self._poll_interval = _seconds("poll_interval", poll_interval)
        self._prune_every = None if prune_every is None else _seconds("prune_every", prune_every)
        self._synchronous = synchronous.upper()
        self._pruned = time.monotonic()
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._poller: asyncio.Task[None] | None = None
        self._waiters: dict[tuple[str, str], set[asyncio.Event]] = {}

    @classmethod
    def from_url(cls, url: str) -> Self:
        """A store on the file ``url`` names (see :func:`path_from_url`)."""
        return cls(path_from_url(url))

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    # ------------------------------------------------------------------ lifecycle
    async def setup(self) -> None:
        """Open the file and create or migrate the tables; safe to call again.

        Raises:
            SchemaVersionError: The tables were written by a newer daimon.
        """
        async with self._lock:
            await self._connection()

    async def aclose(self) -> None:
        """Stop polling and close the connection; safe to call again."""
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()
        self._wake_all()

    async def _connection(self) -> Any:
        """The open connection, opened and migrated on first use; call with the lock held."""
        if self._closed:
            raise DaimonError(f"SQLiteStateStore({self._path!r}) is closed")
        if self._conn is None:
            pending = aiosqlite.connect(
                self._path, timeout=self._busy_timeout, isolation_level=None
            )
            # aiosqlite's worker thread is not a daemon: a program that never closed the store
            # would hang at exit. Each write is one committed transaction, so ending the thread
            # with the interpreter loses nothing that was acknowledged.
            worker = getattr(pending, "_thread", pending)
            if isinstance(worker, threading.Thread) and not worker.is_alive():
                worker.daemon = True
            conn = await pending
            try:
                await conn.execute(f"PRAGMA busy_timeout = {round(self._busy_timeout * 1000)}")
                await self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
                await conn.execute(f"PRAGMA synchronous = {self._synchronous}")
                await self._retry(lambda: self._transaction(conn, _migrate))
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _run(self, work: Callable[[Any], Awaitable[T]], *, write: bool = False) -> T:
        """Run ``work`` on the connection, in one ``BEGIN IMMEDIATE`` transaction when ``write``."""
        async with self._lock:
            conn = await self._connection()
            if write:
                return await self._retry(lambda: self._transaction(conn, work))
            return await self._retry(lambda: work(conn))

    @staticmethod
    async def _transaction(conn: Any, work: Callable[[Any], Awaitable[T]]) -> T:
        """``work(conn)`` in a transaction that holds the write lock from its start."""
        await conn.execute("BEGIN IMMEDIATE")
        try:
            result = await work(conn)
            await conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                await conn.execute("ROLLBACK")
            raise
        return result

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

    async def _rows(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of one statement, run alone (atomic by itself)."""

        async def rows(conn: Any) -> list[tuple[Any, ...]]:
            return list(await conn.execute_fetchall(_SQL[name], params))

        return await self._run(rows, write=False)

    async def prune(self) -> int:
        """Delete expired records, streams and events; how many rows went."""
        self._pruned = time.monotonic()
        now = {"now": time.time()}

        async def prune(conn: Any) -> int:
            count = 0
            for name in ("prune_records", "prune_events", "prune_streams"):
                count += (await conn.execute(_SQL[name], now)).rowcount
            return count

        return await self._run(prune, write=True)

    async def _maybe_prune(self) -> None:
        if self._prune_every is not None and time.monotonic() - self._pruned > self._prune_every:
            await self.prune()

    # ------------------------------------------------------------------ records
    @staticmethod
    def _key(kind: str, key: str) -> dict[str, Any]:
        return {"kind": check_kind(kind), "key": check_name(kind, key), "now": time.time()}

    async def _write(self, name: str, params: dict[str, Any]) -> int | None:
        """Draw a version and run the write ``name`` in one transaction; the version written."""

        async def write(conn: Any) -> int | None:
            (new,) = next(iter(await conn.execute_fetchall(_SQL["bump"])))
            rows = await conn.execute_fetchall(_SQL[name], params | {"version": new, "new": new})
            if not rows:  # nothing written: give the version back (the transaction rolls back)
                raise _NotWritten
            return int(new)

        params |= {"expires": _expires(params["now"], params.pop("ttl"))}
        try:
            version = await self._run(write, write=True)
        except _NotWritten:
            return None
        await self._maybe_prune()
        return version

    async def put(self, kind: str, key: str, value: str, *, ttl: float | None = None) -> int:
        """Write ``value`` under ``key``; its new version."""
        params = self._key(kind, key) | {"value": check_value(kind, value), "ttl": check_ttl(ttl)}
        version = await self._write("put", params)
        assert version is not None  # an upsert always writes
        return version

    async def get(self, kind: str, key: str) -> str | None:
        """The value under ``key``, if any."""
        record = await self.read(kind, key)
        return None if record is None else record.value

    async def read(self, kind: str, key: str) -> StateRecord | None:
        """The value under ``key`` with its version, if any."""
        rows = await self._rows("read", self._key(kind, key))
        return StateRecord(rows[0][0], int(rows[0][1])) if rows else None

    async def replace(
        self, kind: str, key: str, value: str, *, version: int, ttl: float | None = None
    ) -> int | None:
        """Write ``value`` only over ``version`` (0: only if absent); the new version or None."""
        params = self._key(kind, key) | {"value": check_value(kind, value), "ttl": check_ttl(ttl)}
        expected = check_version(version)
        if expected == 0:
            return await self._write("create", params)
        return await self._write("replace", params | {"expected": expected})

    async def take(self, kind: str, key: str) -> str | None:
        """Remove the record and return its value, if any."""
        params = self._key(kind, key)
        rows = await self._rows("take", params)
        if not rows or (rows[0][1] is not None and rows[0][1] <= params["now"]):
            return None  # none, or expired (deleted all the same)
        return str(rows[0][0])

    async def delete(self, kind: str, key: str) -> bool:
        """Remove the record; whether there was one."""
        return await self.take(kind, key) is not None

    # ------------------------------------------------------------------ streams
    @staticmethod
    def _stream(kind: str, stream: str) -> dict[str, Any]:
        return {
            "kind": check_kind(kind),
            "stream": check_name(kind, stream, "stream"),
            "now": time.time(),
        }

    async def append(self, kind: str, stream: str, value: str, *, ttl: float | None = None) -> int:
        """Add ``value`` as the stream's next event; its number."""
        params = self._stream(kind, stream) | {"value": check_value(kind, value)}
        params["expires"] = _expires(params["now"], check_ttl(ttl))

        async def append(conn: Any) -> int:
            ((seq, floor),) = await conn.execute_fetchall(_SQL["append"], params)
            if floor:  # the stream expired once: its older events go
                await conn.execute(_SQL["drop_below"], params | {"floor": floor})
            await conn.execute(_SQL["event"], params | {"seq": seq})
            return int(seq)

        number = await self._run(append, write=True)
        for waiter in self._waiters.get((kind, stream), ()):
            waiter.set()
        await self._maybe_prune()
        return number

    async def read_after(
        self, kind: str, stream: str, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """The kept events numbered above ``after``, oldest first, at most ``limit``."""
        params = self._stream(kind, stream) | {
            "after": check_after(after),
            "limit": check_limit(limit),
        }
        return [(int(seq), value) for seq, value in await self._rows("read_after", params)]

    async def wait_after(
        self, kind: str, stream: str, after: int, *, wait: float, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """Events above ``after``, waiting up to ``wait`` seconds for the first (polling)."""
        self._stream(kind, stream)
        deadline = time.monotonic() + check_wait(wait)
        check_after(after)
        check_limit(limit)
        waiter = asyncio.Event()
        waiters = self._waiters.setdefault((kind, stream), set())
        waiters.add(waiter)
        try:
            while True:
                self._poll()  # again if the poller stopped
                waiter.clear()
                events = await self.read_after(kind, stream, after, limit)
                left = deadline - time.monotonic()
                if events or left <= 0:
                    return events
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wait(), left)
        finally:
            waiters.discard(waiter)
            if not waiters and self._waiters.get((kind, stream)) is waiters:
                del self._waiters[(kind, stream)]

    def _poll(self) -> None:
        """Start polling for other connections' commits unless this handle already does."""
        if not self._closed and (self._poller is None or self._poller.done()):
            self._poller = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        """Wake every waiter when another connection commits, while there are waiters."""
        try:
            seen = await self._data_version()
            self._wake_all()  # a commit may have come before ``seen``: let them read again
            delay = _POLL_FIRST
            while self._waiters:
                await asyncio.sleep(delay)
                version = await self._data_version()
                if version != seen:
                    seen, delay = version, _POLL_FIRST
                    self._wake_all()
                else:
                    delay = min(delay * 2, self._poll_interval)
        except (DaimonError, sqlite3.Error):
            pass  # closed, or the file failed: the waiters' own reads will meet it
        finally:  # stopped (no waiters, closed or failed): let any left read again
            self._wake_all()

    async def _data_version(self) -> int:
        """SQLite's count of commits by other connections, as this connection sees it."""
        rows = await self._run(lambda conn: conn.execute_fetchall("PRAGMA data_version"))
        return int(next(iter(rows))[0])

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.set()


class _NotWritten(Exception):
    """A compare and set found another version: roll back the version drawn."""


async def _migrate(conn: Any) -> None:
    """Create or update the tables (in a write transaction: processes take turns)."""
    await conn.execute(_VERSIONS)
    rows = list(
        await conn.execute_fetchall(
            "SELECT version FROM daimon_schema_versions WHERE component = ?", (SCHEMA.component,)
        )
    )
    found = int(rows[0][0]) if rows else 0
    if found > SCHEMA.version:
        raise SchemaVersionError(SCHEMA.component, found, SCHEMA.version)
    for step in SCHEMA.steps[found:]:
        for statement in filter(None, (s.strip() for s in step.split(";"))):
            await conn.execute(statement)
    if found < SCHEMA.version:
        await conn.execute(
            "INSERT INTO daimon_schema_versions (component, version, migrated_at) "
            "VALUES (?, ?, ?) ON CONFLICT (component) DO UPDATE SET "
            "version = excluded.version, migrated_at = excluded.migrated_at",
            (SCHEMA.component, SCHEMA.version, time.time()),
        )
