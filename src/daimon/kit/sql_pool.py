"""A PostgreSQL store's connections: a pool migrated on first use, operations retried.

Each operation is tried again on a fresh connection when its connection fails. The stores of
:mod:`daimon.checkpoint.postgres` and :mod:`daimon.memory.postgres` (and any plugin's) hand an
operation to :meth:`Connections.run` as a function of one connection. Before an operation is
tried again, the pool checks its idle connections and drops the dead ones: after a server
restart every idle connection is dead, and without the check each retry would take another.
(A check as each connection is taken would cost a round trip per operation.) psycopg is loaded
through :func:`~daimon.core.optional.require`: the kit itself imports no optional library.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from daimon.core.errors import BuilderError, DaimonError
from daimon.core.optional import require
from daimon.kit.checks import check_positive
from daimon.kit.sql_schema import Schema, check_prefix, migrate

__all__ = ("ATTEMPTS", "Connections")

T = TypeVar("T")

ATTEMPTS = 3
"""How many times an operation is tried when its connection fails."""

_log = logging.getLogger("daimon.postgres")


class Connections:
    """A store's pool of connections to one database, its schema migrated before first use.

    Args:
        url_or_pool: A ``postgresql://`` URL or libpq connection string (the store then owns its
            pool), or a ``psycopg_pool.AsyncConnectionPool`` (opened if needed, never closed).
        schema: The store's tables, brought to their newest version on first use.
        prefix: Prefix of the store's table names.
        min_size: Connections an owned pool keeps open.
        max_size: Connections an owned pool opens at most.
        name: The store's name, for errors and logs.

    Raises:
        BuilderError: A bad URL, pool, prefix or size.
    """

    __slots__ = (
        "_closed",
        "_lock",
        "_max_size",
        "_min_size",
        "_name",
        "_owned",
        "_pool",
        "_prefix",
        "_ready",
        "_schema",
        "_url",
    )

    def __init__(
        self,
        url_or_pool: Any,
        *,
        schema: Schema,
        prefix: str,
        min_size: int,
        max_size: int,
        name: str,
    ) -> None:
        self._prefix = check_prefix(prefix)
        self._owned = isinstance(url_or_pool, str)
        if self._owned and not url_or_pool:
            raise BuilderError("url must be a PostgreSQL connection string, got ''")
        if not self._owned and not hasattr(url_or_pool, "connection"):
            raise BuilderError(
                "expected a PostgreSQL URL or a psycopg_pool.AsyncConnectionPool, "
                f"got {type(url_or_pool).__name__}"
            )
        self._url: str = url_or_pool if self._owned else ""
        self._pool: Any = None if self._owned else url_or_pool
        self._min_size = check_positive("min_size", min_size)
        self._max_size = check_positive("max_size", max_size)
        if max_size < min_size:
            raise BuilderError(f"max_size ({max_size}) is below min_size ({min_size})")
        self._schema = schema
        self._name = name
        self._lock = asyncio.Lock()
        self._ready = False
        self._closed = False

    @property
    def prefix(self) -> str:
        """Prefix of the store's table names."""
        return self._prefix

    async def pool(self) -> Any:
        """The pool, opened and the schema migrated on first use.

        Raises:
            DaimonError: The store was closed.
            SchemaVersionError: The database's tables were written by a newer daimon.
        """
        if self._ready:
            return self._pool
        async with self._lock:
            if self._closed:
                raise DaimonError(f"{self._name} is closed")
            if self._pool is None:
                self._pool = await _open_pool(self._url, self._min_size, self._max_size)
            elif self._pool.closed:
                await self._pool.open(wait=True)
            if not self._ready:
                await self._retried(self._pool, self._migrate, True)
                self._ready = True
        return self._pool

    async def run(self, work: Callable[[Any], Awaitable[T]], *, retry: bool = True) -> T:
        """``work(connection)``, tried again on a fresh connection when its connection fails."""
        return await self._retried(await self.pool(), work, retry)

    async def aclose(self) -> None:
        """Close the pool if the store opened it; safe to call again."""
        async with self._lock:
            self._closed = True
            self._ready = False
            if self._owned and self._pool is not None:
                pool, self._pool = self._pool, None
                await pool.close()

    async def _migrate(self, conn: Any) -> None:
        await migrate(conn, self._schema, self._prefix)

    async def _retried(self, pool: Any, work: Callable[[Any], Awaitable[T]], retry: bool) -> T:
        psycopg = require("psycopg", extra="postgres")
        psycopg_pool = require("psycopg_pool", extra="postgres")
        for attempt in range(1, ATTEMPTS + 1):
            try:
                async with pool.connection() as conn:
                    return await work(conn)
            except psycopg.OperationalError as exc:
                if not retry or attempt == ATTEMPTS or isinstance(exc, psycopg_pool.PoolTimeout):
                    raise
                _log.warning("%s: retrying after a connection error: %s", self._name, exc)
                await asyncio.sleep(0.05 * attempt)
                await pool.check()  # the other idle connections may be dead too
        raise AssertionError("unreachable")


async def _open_pool(url: str, min_size: int, max_size: int) -> Any:
    """A new pool to ``url``, opened."""
    psycopg_pool = require("psycopg_pool", extra="postgres")
    pool = psycopg_pool.AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=False,
    )
    await pool.open(wait=True)
    return pool
