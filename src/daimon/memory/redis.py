"""Conversation history in Redis: one list per session, shared by every process that uses it.

A batch is appended with one ``RPUSH`` inside ``MULTI``/``EXEC``, so it lands whole and contiguous
even when many processes append to one session at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Self

from daimon.core.errors import BuilderError
from daimon.core.ids import check_id
from daimon.core.messages import Message
from daimon.core.optional import require
from daimon.kit.lifecycle import SetupOnEnter
from daimon.kit.memory_records import decode_message, encode_message

aioredis = require("redis.asyncio", extra="redis")
redis_retry = require("redis.asyncio.retry", extra="redis")
redis_backoff = require("redis.backoff", extra="redis")

__all__ = ("RedisMemory",)

_GLOB = re.compile(r"([*?\[\]\\])")


def _connect(url: str) -> Any:
    """A client that reconnects and retries a command up to 3 times when the connection drops."""
    backoff = redis_backoff.ExponentialWithJitterBackoff(cap=1.0, base=0.05)
    return aioredis.Redis.from_url(url, retry=redis_retry.Retry(backoff, 3))


class RedisMemory(SetupOnEnter):
    """Keeps every session's full history in a Redis list at ``<prefix><session_id>``.

    Each item is one message as versioned JSON. When the connection drops, redis-py reconnects and
    retries the command; if the reply of an append was lost in flight the retry may append that
    batch a second time (at-least-once), but an acknowledged append is never lost.

    Args:
        client: A ``redis.asyncio.Redis`` (left open by :meth:`aclose`), or a URL such as
            ``"redis://localhost:6379/0"`` (the connection is then this handle's to close).
        prefix: Prefix of every session key.
        ttl: Seconds a session is kept after its last write (``None``: forever).
    """

    def __init__(
        self, client: Any, *, prefix: str = "daimon:memory:", ttl: float | None = None
    ) -> None:
        _check_ttl(ttl)
        self._owned = isinstance(client, str)
        self._client: Any = _connect(client) if self._owned else client
        self._prefix = prefix
        self._ttl_ms = None if ttl is None else max(1, round(ttl * 1000))
        self._closed = False

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "daimon:memory:", ttl: float | None = None
    ) -> Self:
        """A memory on its own connection to ``url``."""
        return cls(url, prefix=prefix, ttl=ttl)

    @property
    def prefix(self) -> str:
        """Prefix of every session key."""
        return self._prefix

    async def setup(self) -> None:
        """Check that the server answers (Redis needs no schema)."""
        await self._client.ping()

    async def aclose(self) -> None:
        """Close the connection if this memory opened it; safe to call again."""
        if self._owned and not self._closed:
            self._closed = True
            await self._client.aclose()

    def _key(self, session_id: str) -> str:
        return self._prefix + session_id

    async def get_messages(self, session_id: str) -> list[Message]:
        """The session's messages, oldest first."""
        check_id("session", session_id)
        items = await self._client.lrange(self._key(session_id), 0, -1)
        return [decode_message(session_id, i, item) for i, item in enumerate(items)]

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages to the session in one transaction: all of them or none."""
        check_id("session", session_id)
        # Encode all before writing any.
        payloads = [encode_message(m).encode("utf-8") for m in messages]
        if not payloads:
            return
        key = self._key(session_id)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.rpush(key, *payloads)
            if self._ttl_ms is not None:
                pipe.pexpire(key, self._ttl_ms)
            await pipe.execute()

    async def clear(self, session_id: str) -> None:
        """Forget the session."""
        check_id("session", session_id)
        await self._client.delete(self._key(session_id))

    async def list_sessions(self) -> list[str]:
        """Ids of the sessions that have messages, sorted (a ``SCAN`` of the prefix)."""
        pattern = _GLOB.sub(r"\\\1", self._prefix) + "*"
        sessions: set[str] = set()
        async for key in self._client.scan_iter(match=pattern, count=500, _type="list"):
            text = key.decode("utf-8") if isinstance(key, bytes) else str(key)
            sessions.add(text[len(self._prefix) :])
        return sorted(sessions)


def _check_ttl(ttl: object) -> None:
    if ttl is None:
        return
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
        raise BuilderError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
