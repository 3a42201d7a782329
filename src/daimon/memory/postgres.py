r"""Conversation history in PostgreSQL, shared by every process that uses the same ``prefix``.

Tables, under ``prefix`` (created by :meth:`PostgresMemory.setup` through
:mod:`daimon.kit.sql_schema`, component ``"memory"``)::

    <prefix>memory_sessions   session_id PRIMARY KEY, last_seq, last_batch, updated_at
    <prefix>memory_messages   session_id, seq, message json   PRIMARY KEY (session_id, seq)

``message`` is one message as versioned JSON (:mod:`daimon.kit.memory_records`), byte for byte
in a ``json`` column (``jsonb`` would refuse the ``\u0000`` a message may hold). A batch is one
statement: it takes the next ``seq`` numbers from its session's row (which appenders to one
session take in turn) and inserts every message, so it lands whole and contiguous.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Self, TypeVar

from daimon.core.ids import check_id
from daimon.core.messages import Message
from daimon.core.optional import require
from daimon.kit.lifecycle import SetupOnEnter
from daimon.kit.memory_records import decode_message, encode_message
from daimon.kit.sql_pool import Connections
from daimon.kit.sql_schema import DEFAULT_PREFIX, Schema

psycopg = require("psycopg", extra="postgres")
psycopg_pool = require("psycopg_pool", extra="postgres")

__all__ = ("PostgresMemory", "SCHEMA")

T = TypeVar("T")

_log = logging.getLogger("daimon.memory")

SCHEMA = Schema(
    "memory",
    (
        """
        CREATE TABLE {prefix}memory_sessions (
            session_id text COLLATE "C" PRIMARY KEY,
            last_seq bigint NOT NULL,
            last_batch uuid NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE {prefix}memory_messages (
            session_id text COLLATE "C" NOT NULL,
            seq bigint NOT NULL,
            message json NOT NULL,
            PRIMARY KEY (session_id, seq)
        );
        """,
    ),
)
"""The memory tables, version by version (``daimon db migrate`` applies them)."""

"""Tries of an operation whose connection failed."""

# A batch: its seq numbers from the session's row (locked until commit), then its messages. A
# retry of a batch whose reply was lost finds itself as the session's last batch and adds nothing.
_APPEND = """
WITH session AS (
    INSERT INTO {p}memory_sessions AS s (session_id, last_seq, last_batch)
    VALUES (%(session)s, %(n)s, %(batch)s)
    ON CONFLICT (session_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq,
        last_batch = EXCLUDED.last_batch, updated_at = now()
    WHERE s.last_batch <> EXCLUDED.last_batch
    RETURNING last_seq
)
INSERT INTO {p}memory_messages (session_id, seq, message)
SELECT %(session)s, session.last_seq - %(n)s + m.n, m.message::json
FROM session, unnest(%(messages)s::text[]) WITH ORDINALITY AS m(message, n)
"""
_GET = "SELECT seq, message::text FROM {p}memory_messages WHERE session_id = %s ORDER BY seq"
_LIST = "SELECT session_id FROM {p}memory_sessions ORDER BY session_id"
# Two statements in one transaction: the first waits for appenders of the session, so the second
# (a new snapshot) sees every message they committed.
_CLEAR = (
    "DELETE FROM {p}memory_sessions WHERE session_id = %s",
    "DELETE FROM {p}memory_messages WHERE session_id = %s",
)


class PostgresMemory(SetupOnEnter):
    """Keeps every session's full history in PostgreSQL.

    An operation whose connection fails is tried again on a fresh connection (up to 3 times). A
    batch whose reply was lost is not appended twice, unless another batch reached the session
    in between (then it may be: at least once, as with Redis).

    Args:
        url_or_pool: A ``postgresql://`` URL or libpq connection string (the memory then owns
            its pool), or a ``psycopg_pool.AsyncConnectionPool`` (opened if needed, never closed
            by :meth:`aclose`).
        prefix: Prefix of this store's table names (see :mod:`daimon.kit.sql_schema`).
        min_size: Connections the memory's own pool keeps open.
        max_size: Connections the memory's own pool opens at most.
    """

    def __init__(
        self,
        url_or_pool: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        self._db = Connections(
            url_or_pool,
            schema=SCHEMA,
            prefix=prefix,
            min_size=min_size,
            max_size=max_size,
            name="PostgresMemory",
        )
        self._prefix = self._db.prefix
        self._append = _APPEND.replace("{p}", self._prefix)
        self._get = _GET.replace("{p}", self._prefix)
        self._list = _LIST.replace("{p}", self._prefix)
        self._clear = tuple(q.replace("{p}", self._prefix) for q in _CLEAR)

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = DEFAULT_PREFIX, min_size: int = 1, max_size: int = 4
    ) -> Self:
        """A memory on its own connection pool to ``url``."""
        return cls(url, prefix=prefix, min_size=min_size, max_size=max_size)

    @property
    def prefix(self) -> str:
        """Prefix of this store's table names."""
        return self._prefix

    async def setup(self) -> None:
        """Open the pool and bring the tables to this daimon's version; safe to call again.

        Raises:
            SchemaVersionError: The database's tables were written by a newer daimon.
        """
        await self._db.pool()

    async def aclose(self) -> None:
        """Close the pool if this memory opened it; safe to call again."""
        await self._db.aclose()

    async def get_messages(self, session_id: str) -> list[Message]:
        """The session's messages, oldest first."""
        check_id("session", session_id)

        async def fetch(conn: Any) -> list[tuple[Any, ...]]:
            cursor = await conn.execute(self._get, (session_id,))
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
            return rows

        rows = await self._run(fetch)
        return [decode_message(session_id, seq, payload) for seq, payload in rows]

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages to the session in one statement: all of them or none."""
        check_id("session", session_id)
        payloads = [encode_message(m) for m in messages]  # encode all before writing any
        if not payloads:
            return
        params = {
            "session": session_id,
            "n": len(payloads),
            "batch": uuid.uuid4(),
            "messages": payloads,
        }

        async def append(conn: Any) -> None:
            await conn.execute(self._append, params)

        await self._run(append)

    async def clear(self, session_id: str) -> None:
        """Forget the session."""
        check_id("session", session_id)

        async def clear(conn: Any) -> None:
            async with conn.transaction():
                for query in self._clear:
                    await conn.execute(query, (session_id,))

        await self._run(clear)

    async def list_sessions(self) -> list[str]:
        """Ids of the sessions that have messages, sorted."""

        async def fetch(conn: Any) -> list[str]:
            cursor = await conn.execute(self._list)
            return [str(row[0]) for row in await cursor.fetchall()]

        return sorted(await self._run(fetch))

    async def _run(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """``work(connection)``, tried again on a fresh connection when the connection fails."""
        return await self._db.run(work)
