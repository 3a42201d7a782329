"""The server's state in Redis: :class:`RedisStateStore`, shared by every replica.

Keys, under a prefix (``daimon:state:`` by default)::

    <prefix>r:<kind>:<key>      a record: a hash of ``value`` and ``version``, with PX expiry
    <prefix>s:<kind>:<stream>   a stream: a Redis Stream whose entry ids are ``0-<number>``
    <prefix>versions            the counter every record version is drawn from

Writes of records run as Lua scripts (one atomic step each): a version is drawn with ``INCR``, a
compare and set reads the version and writes in the same step, a take reads and deletes. An
append is ``XADD <stream> 0-* ...`` (Redis 7: numbered 1, 2, ... by the server) with its
``PEXPIRE`` in one ``MULTI``; a wait is ``XREAD BLOCK``. One Redis server (or a primary with
replicas): the scripts touch the record and the counter together, which Redis Cluster would
refuse unless both hash to one slot.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Self

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

aioredis = require("redis.asyncio", extra="redis")

__all__ = ("RedisStateStore",)

_BLOCK_SLICE = 2.0
"""Longest single ``XREAD BLOCK``, in seconds: well under redis-py's socket timeout (5 s by
default in redis-py 8), which a longer block would trip."""


def _raise_if_cancelled() -> None:
    """Let a cancellation through that the client library turned into an empty reply."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _block_slice(client: Any) -> float:
    """The longest block ``client``'s socket timeout allows (half of it, at most 2 s)."""
    pool = getattr(client, "connection_pool", None)
    timeout = getattr(pool, "connection_kwargs", {}).get("socket_timeout")
    return _BLOCK_SLICE if not timeout else min(_BLOCK_SLICE, float(timeout) / 2)


# KEYS: record, counter. ARGV: value, ttl in ms ("" for none). The new version.
_WRITE = """
local version = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'version', version)
if ARGV[2] == '' then redis.call('PERSIST', KEYS[1])
else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return version
"""

# KEYS: record, counter. ARGV: value, ttl in ms, expected version ("0": no record). New or nil.
_REPLACE = (
    """
local found = redis.call('HGET', KEYS[1], 'version') or '0'
if found ~= ARGV[3] then return false end
"""
    + _WRITE
)

# KEYS: record. The value, or nil; the record is gone either way.
_TAKE = """
local value = redis.call('HGET', KEYS[1], 'value')
if value then redis.call('DEL', KEYS[1]) end
return value
"""


def _text(reply: bytes | str) -> str:
    """A reply as text (a client may decode replies itself)."""
    return reply.decode("utf-8") if isinstance(reply, bytes) else reply


def _number(entry_id: bytes | str) -> int:
    """The event number of a stream entry id ``0-<number>``."""
    return int(_text(entry_id).partition("-")[2])


def _events(entries: list[tuple[Any, dict[Any, Any]]]) -> list[tuple[int, str]]:
    """Stream entries as (number, value) pairs."""
    return [(_number(entry_id), _text(next(iter(fields.values())))) for entry_id, fields in entries]


def _ttl_ms(ttl: float | None) -> str:
    return "" if ttl is None else str(max(1, round(ttl * 1000)))


class RedisStateStore(SetupOnEnter):
    """A :class:`~daimon.core.StateStore` in Redis (7.0 or later), shared by every replica.

    Args:
        client: A ``redis.asyncio.Redis`` (left open by :meth:`aclose`), or a URL such as
            ``"redis://localhost:6379/0"`` (the connection is then this handle's to close).
        prefix: Prefix of every key.
    """

    def __init__(self, client: Any, *, prefix: str = "daimon:state:") -> None:
        self._owned = isinstance(client, str)
        self._client: Any = aioredis.Redis.from_url(client) if self._owned else client
        self._prefix = prefix
        self._counter = prefix + "versions"
        self._write = self._client.register_script(_WRITE)
        self._replace = self._client.register_script(_REPLACE)
        self._take = self._client.register_script(_TAKE)
        self._closed = False
        self._block_slice = _block_slice(self._client)

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "daimon:state:") -> Self:
        """A store on its own connection to ``url``."""
        return cls(url, prefix=prefix)

    @property
    def prefix(self) -> str:
        """Prefix of every key."""
        return self._prefix

    async def setup(self) -> None:
        """Check that the server answers (Redis needs no schema)."""
        await self._client.ping()

    async def aclose(self) -> None:
        """Close the connection if this store opened it; safe to call again."""
        if self._owned and not self._closed:
            self._closed = True
            await self._client.aclose()

    def _record(self, kind: str, key: str) -> str:
        return f"{self._prefix}r:{check_kind(kind)}:{check_name(kind, key)}"

    def _stream(self, kind: str, stream: str) -> str:
        return f"{self._prefix}s:{check_kind(kind)}:{check_name(kind, stream, 'stream')}"

    async def put(self, kind: str, key: str, value: str, *, ttl: float | None = None) -> int:
        """Write ``value`` under ``key``; its new version."""
        record = self._record(kind, key)
        args = [check_value(kind, value), _ttl_ms(check_ttl(ttl))]
        return int(await self._write(keys=[record, self._counter], args=args))

    async def get(self, kind: str, key: str) -> str | None:
        """The value under ``key``, if any."""
        value = await self._client.hget(self._record(kind, key), "value")
        return None if value is None else _text(value)

    async def read(self, kind: str, key: str) -> StateRecord | None:
        """The value under ``key`` with its version, if any."""
        value, version = await self._client.hmget(self._record(kind, key), "value", "version")
        return None if value is None else StateRecord(_text(value), int(version))

    async def replace(
        self, kind: str, key: str, value: str, *, version: int, ttl: float | None = None
    ) -> int | None:
        """Write ``value`` only over ``version`` (0: only if absent); the new version or None."""
        record = self._record(kind, key)
        args = [check_value(kind, value), _ttl_ms(check_ttl(ttl)), str(check_version(version))]
        written = await self._replace(keys=[record, self._counter], args=args)
        return None if written is None else int(written)

    async def take(self, kind: str, key: str) -> str | None:
        """Remove the record and return its value, if any."""
        value = await self._take(keys=[self._record(kind, key)])
        return None if value is None else _text(value)

    async def delete(self, kind: str, key: str) -> bool:
        """Remove the record; whether there was one."""
        return bool(await self._client.delete(self._record(kind, key)))

    async def append(self, kind: str, stream: str, value: str, *, ttl: float | None = None) -> int:
        """Add ``value`` as the stream's next event; its number."""
        name = self._stream(kind, stream)
        payload = check_value(kind, value).encode("utf-8")
        ttl_ms = _ttl_ms(check_ttl(ttl))
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.execute_command("XADD", name, "0-*", "v", payload)
            if ttl_ms:
                pipe.pexpire(name, int(ttl_ms))
            else:
                pipe.persist(name)
            entry_id, _ = await pipe.execute()
        return _number(entry_id)

    async def read_after(
        self, kind: str, stream: str, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """The kept events numbered above ``after``, oldest first, at most ``limit``."""
        name = self._stream(kind, stream)
        start = f"(0-{check_after(after)}"
        return _events(await self._client.xrange(name, start, "+", count=check_limit(limit)))

    async def wait_after(
        self, kind: str, stream: str, after: int, *, wait: float, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """Events above ``after``, waiting up to ``wait`` seconds for the first (XREAD BLOCK)."""
        name = self._stream(kind, stream)
        start = f"0-{check_after(after)}"
        count = check_limit(limit)
        deadline = time.monotonic() + check_wait(wait)
        while True:  # in slices: one block longer than the client's socket timeout would fail
            left = deadline - time.monotonic()
            block = max(1, round(min(left, self._block_slice) * 1000))
            found = await self._client.xread({name: start}, count=count, block=block)
            if found:
                return _events(found[0][1])
            _raise_if_cancelled()  # redis-py may swallow a cancellation and return nothing
            if left <= self._block_slice:
                return []
