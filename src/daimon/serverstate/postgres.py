"""The server's state in PostgreSQL: :class:`PostgresStateStore`, shared by every replica.

Tables (``daimon_`` prefix by default; versioned by :mod:`daimon.kit.sql_schema` as component
``server_state``)::

    <prefix>state_records  (kind, key) PRIMARY KEY, value text, version bigint, expires_at
    <prefix>state_streams  (kind, stream) PRIMARY KEY, last_seq, floor_seq, expires_at
    <prefix>state_events   (kind, stream, seq) PRIMARY KEY, value text
    <prefix>state_versions a sequence: every record version is drawn from it

Every call is one statement on a pooled connection in autocommit: a compare and set is an
``UPDATE ... WHERE version = %s``, a take a ``DELETE ... RETURNING``. An append bumps its
stream's ``last_seq`` (the row lock orders racing appenders), inserts the event and sends
``NOTIFY <prefix>state_events`` in one statement; a wait listens (``LISTEN``) on one connection per
handle. Expired rows read as absent and are deleted by :meth:`PostgresStateStore.prune`, which
writes call at most once per ``prune_every`` seconds. Expiry is by the database's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any, Self

from daimon.core.errors import BuilderError
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
from daimon.kit.sql_pool import Connections
from daimon.kit.sql_schema import DEFAULT_PREFIX, Schema

psycopg = require("psycopg", extra="postgres")
psycopg_pool = require("psycopg_pool", extra="postgres")

__all__ = ("PostgresStateStore", "SCHEMA")

SCHEMA = Schema(
    component="server_state",
    steps=(
        """
        CREATE SEQUENCE {prefix}state_versions;
        CREATE TABLE {prefix}state_records (
            kind text NOT NULL, key text NOT NULL, value text NOT NULL,
            version bigint NOT NULL, expires_at timestamptz,
            PRIMARY KEY (kind, key));
        CREATE INDEX {prefix}state_records_expiry ON {prefix}state_records (expires_at)
            WHERE expires_at IS NOT NULL;
        CREATE TABLE {prefix}state_streams (
            kind text NOT NULL, stream text NOT NULL, last_seq bigint NOT NULL,
            floor_seq bigint NOT NULL DEFAULT 0, expires_at timestamptz,
            PRIMARY KEY (kind, stream));
        CREATE INDEX {prefix}state_streams_expiry ON {prefix}state_streams (expires_at)
            WHERE expires_at IS NOT NULL;
        CREATE TABLE {prefix}state_events (
            kind text NOT NULL, stream text NOT NULL, seq bigint NOT NULL, value text NOT NULL,
            PRIMARY KEY (kind, stream, seq));
        """,
        # Streams hold live events (runs' frames, MCP events) kept minutes: unlogged, they cost
        # no WAL (an append takes half the time); a database crash empties them, as it ends
        # every stream anyway. Records (responses, paused runs) stay logged.
        """
        ALTER TABLE {prefix}state_events SET UNLOGGED;
        ALTER TABLE {prefix}state_streams SET UNLOGGED;
        """,
    ),
)
"""The tables, versioned: step 1 made them, step 2 made the streams' tables unlogged."""

_ALIVE = "(expires_at IS NULL OR expires_at > now())"
_EXPIRES = "now() + %(ttl)s * interval '1 second'"


def _statements(p: str) -> dict[str, str]:
    """Every statement, for the table prefix ``p``."""
    records, streams, events = f"{p}state_records", f"{p}state_streams", f"{p}state_events"
    insert = (
        f"INSERT INTO {records} AS r (kind, key, value, version, expires_at) VALUES "
        f"(%(kind)s, %(key)s, %(value)s, nextval('{p}state_versions'), {_EXPIRES}) "
        "ON CONFLICT (kind, key) DO UPDATE SET value = EXCLUDED.value, "
        "version = EXCLUDED.version, expires_at = EXCLUDED.expires_at"
    )
    where = "WHERE kind = %(kind)s AND key = %(key)s"
    return {
        "put": f"{insert} RETURNING version",
        "create": f"{insert} WHERE r.expires_at <= now() RETURNING version",
        "replace": (
            f"UPDATE {records} SET value = %(value)s, version = nextval('{p}state_versions'), "
            f"expires_at = {_EXPIRES} {where} AND version = %(version)s AND {_ALIVE} "
            "RETURNING version"
        ),
        "read": f"SELECT value, version FROM {records} {where} AND {_ALIVE}",
        "take": f"DELETE FROM {records} {where} RETURNING value, {_ALIVE}",
        "append": (
            f"WITH s AS (INSERT INTO {streams} AS s (kind, stream, last_seq, expires_at) "
            f"VALUES (%(kind)s, %(stream)s, 1, {_EXPIRES}) ON CONFLICT (kind, stream) DO UPDATE "
            "SET floor_seq = CASE WHEN s.expires_at <= now() THEN s.last_seq "
            "ELSE s.floor_seq END, last_seq = s.last_seq + 1, expires_at = EXCLUDED.expires_at "
            "RETURNING last_seq, floor_seq), "
            f"gone AS (DELETE FROM {events} WHERE kind = %(kind)s AND stream = %(stream)s "
            "AND seq <= (SELECT floor_seq FROM s)), "
            f"e AS (INSERT INTO {events} (kind, stream, seq, value) "
            "SELECT %(kind)s, %(stream)s, last_seq, %(value)s FROM s RETURNING seq) "
            f"SELECT seq, pg_notify('{p}state_events', %(note)s) FROM e"
        ),
        "read_after": (
            f"SELECT e.seq, e.value FROM {events} e JOIN {streams} s "
            "ON s.kind = e.kind AND s.stream = e.stream "
            "WHERE e.kind = %(kind)s AND e.stream = %(stream)s AND e.seq > %(after)s "
            "AND (s.expires_at IS NULL OR s.expires_at > now()) ORDER BY e.seq LIMIT %(limit)s"
        ),
        "prune_records": f"DELETE FROM {records} WHERE expires_at <= now()",
        "prune_events": (
            f"DELETE FROM {events} e USING {streams} s WHERE s.kind = e.kind "
            "AND s.stream = e.stream AND s.expires_at <= now()"
        ),
        "prune_streams": f"DELETE FROM {streams} WHERE expires_at <= now()",
    }


class PostgresStateStore(SetupOnEnter):
    """A :class:`~daimon.core.StateStore` in PostgreSQL, shared by every replica.

    Args:
        url: A PostgreSQL connection string.
        prefix: Prefix of every table (see :mod:`daimon.kit.sql_schema`).
        min_size: Connections the pool keeps open.
        max_size: Connections the pool opens at most (a wait holds none: it listens on its own).
        prune_every: Seconds between deletions of expired rows, run by a write (``None``: only
            when :meth:`prune` is called).

    Raises:
        BuilderError: A setting is wrong.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        min_size: int = 1,
        max_size: int = 4,
        prune_every: float | None = 300.0,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise BuilderError(f"url must be a PostgreSQL connection string, got {url!r}")
        self._url = url
        self._db = Connections(
            url,
            schema=SCHEMA,
            prefix=prefix,
            min_size=min_size,
            max_size=max_size,
            name="PostgresStateStore",
        )
        self._prefix = self._db.prefix
        if prune_every is not None:
            check_ttl(prune_every)
        self._prune_every = prune_every
        self._pruned = time.monotonic()
        self._sql = _statements(self._prefix)
        self._channel = f"{self._prefix}state_events"
        self._lock = asyncio.Lock()
        self._listener: asyncio.Task[None] | None = None
        self._listening: Any = None  # the listener's connection
        self._waiters: dict[tuple[str, str], set[asyncio.Event]] = {}

    @classmethod
    def from_url(cls, url: str, *, prefix: str = DEFAULT_PREFIX) -> Self:
        """A store on its own connection pool to ``url``."""
        return cls(url, prefix=prefix)

    @property
    def prefix(self) -> str:
        """Prefix of every table."""
        return self._prefix

    # ------------------------------------------------------------------ lifecycle
    async def setup(self) -> None:
        """Create or migrate the tables and open the pool; safe to call again.

        Raises:
            SchemaVersionError: The tables were written by a newer daimon.
        """
        await self._db.pool()

    async def aclose(self) -> None:
        """Stop listening and close the pool; safe to call again."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        conn, self._listening = self._listening, None
        if conn is not None:  # a listener cancelled before it ran never closed it
            await conn.close()
        await self._db.aclose()

    async def _run(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of one statement (not tried again: a write may have landed)."""

        async def rows(conn: Any) -> list[tuple[Any, ...]]:
            cursor = await conn.execute(self._sql[name], params)
            return list(await cursor.fetchall()) if cursor.description else []

        return await self._db.run(rows, retry=False)

    async def _written(self, rows: list[tuple[Any, ...]]) -> int | None:
        """The version a write returned, after pruning if it is time."""
        if self._prune_every is not None and time.monotonic() - self._pruned > self._prune_every:
            await self.prune()
        return int(rows[0][0]) if rows else None

    async def prune(self) -> int:
        """Delete expired records, streams and events; how many rows went."""
        self._pruned = time.monotonic()

        async def prune(conn: Any) -> int:
            count = 0
            async with conn.transaction():
                for name in ("prune_records", "prune_events", "prune_streams"):
                    count += (await conn.execute(self._sql[name])).rowcount
            return count

        return await self._db.run(prune)

    # ------------------------------------------------------------------ records
    def _key(self, kind: str, key: str) -> dict[str, Any]:
        return {"kind": check_kind(kind), "key": check_name(kind, key)}

    async def put(self, kind: str, key: str, value: str, *, ttl: float | None = None) -> int:
        """Write ``value`` under ``key``; its new version."""
        params = self._key(kind, key) | {"value": check_value(kind, value), "ttl": check_ttl(ttl)}
        version = await self._written(await self._run("put", params))
        assert version is not None  # an upsert always returns its row
        return version

    async def get(self, kind: str, key: str) -> str | None:
        """The value under ``key``, if any."""
        record = await self.read(kind, key)
        return None if record is None else record.value

    async def read(self, kind: str, key: str) -> StateRecord | None:
        """The value under ``key`` with its version, if any."""
        rows = await self._run("read", self._key(kind, key))
        return StateRecord(rows[0][0], int(rows[0][1])) if rows else None

    async def replace(
        self, kind: str, key: str, value: str, *, version: int, ttl: float | None = None
    ) -> int | None:
        """Write ``value`` only over ``version`` (0: only if absent); the new version or None."""
        params = self._key(kind, key) | {
            "value": check_value(kind, value),
            "ttl": check_ttl(ttl),
            "version": check_version(version),
        }
        return await self._written(await self._run("create" if version == 0 else "replace", params))

    async def take(self, kind: str, key: str) -> str | None:
        """Remove the record and return its value, if any."""
        rows = await self._run("take", self._key(kind, key))
        return rows[0][0] if rows and rows[0][1] else None

    async def delete(self, kind: str, key: str) -> bool:
        """Remove the record; whether there was one."""
        return await self.take(kind, key) is not None

    # ------------------------------------------------------------------ streams
    def _stream(self, kind: str, stream: str) -> dict[str, Any]:
        return {"kind": check_kind(kind), "stream": check_name(kind, stream, "stream")}

    async def append(self, kind: str, stream: str, value: str, *, ttl: float | None = None) -> int:
        """Add ``value`` as the stream's next event; its number."""
        params = self._stream(kind, stream) | {
            "value": check_value(kind, value),
            "ttl": check_ttl(ttl),
            "note": json.dumps([kind, stream], ensure_ascii=False),
        }
        number = await self._written(await self._run("append", params))
        assert number is not None  # the insert always returns its row
        return number

    async def read_after(
        self, kind: str, stream: str, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """The kept events numbered above ``after``, oldest first, at most ``limit``."""
        params = self._stream(kind, stream) | {
            "after": check_after(after),
            "limit": check_limit(limit),
        }
        return [(int(seq), value) for seq, value in await self._run("read_after", params)]

    async def wait_after(
        self, kind: str, stream: str, after: int, *, wait: float, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """Events above ``after``, waiting up to ``wait`` seconds for the first (LISTEN)."""
        self._stream(kind, stream)
        deadline = time.monotonic() + check_wait(wait)
        check_after(after)
        check_limit(limit)
        waiter = asyncio.Event()
        waiters = self._waiters.setdefault((kind, stream), set())
        waiters.add(waiter)
        try:
            while True:
                await self._listen()  # again if the listening connection was lost
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

    async def _listen(self) -> None:
        """Start listening for appends unless this handle already does."""
        async with self._lock:
            if self._listener is not None and not self._listener.done():
                return
            conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
            try:
                await conn.execute(f"LISTEN {self._channel}")
            except BaseException:
                await conn.close()
                raise
            self._listening = conn
            self._listener = asyncio.create_task(self._dispatch(conn))

    async def _dispatch(self, conn: Any) -> None:
        """Wake the waiters of each stream appended to, until cancelled or disconnected."""
        try:
            async with conn:
                async for note in conn.notifies():
                    kind, stream = json.loads(note.payload)
                    for waiter in self._waiters.get((kind, stream), ()):
                        waiter.set()
        finally:  # nothing will wake them now: let them read again
            for waiters in self._waiters.values():
                for waiter in waiters:
                    waiter.set()
