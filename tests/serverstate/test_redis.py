from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from daimon.core import StateStore
from daimon.serverstate.redis import RedisStateStore
from daimon.testing.state_store import StateStoreConformance, StateStoreFactory

pytestmark = pytest.mark.service("redis")


class TestRedisStateStore(StateStoreConformance):
    @pytest.fixture
    async def make_store(
        self, redis_url: str, redis_prefix: str
    ) -> AsyncIterator[StateStoreFactory]:
        handles: list[RedisStateStore] = []

        async def make() -> StateStore:
            handles.append(RedisStateStore.from_url(redis_url, prefix=redis_prefix))
            await handles[-1].setup()
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


async def test_keys_and_expiry_in_redis(redis_url: str, redis_prefix: str) -> None:
    async with RedisStateStore(redis_url, prefix=redis_prefix) as store:
        assert isinstance(store, StateStore)
        await store.put("response", "r1", '"a"', ttl=60)
        await store.append("mcp_event", "s1", '"e"', ttl=60)
        client = aioredis.Redis.from_url(redis_url)
        try:
            assert 0 < await client.pttl(f"{redis_prefix}r:response:r1") <= 60_000
            assert 0 < await client.pttl(f"{redis_prefix}s:mcp_event:s1") <= 60_000
            await store.put("response", "r1", '"b"')
            assert await client.pttl(f"{redis_prefix}r:response:r1") == -1
        finally:
            await client.aclose()


async def test_a_given_client_is_left_open(redis_url: str, redis_prefix: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        store = RedisStateStore(client, prefix=redis_prefix)
        await store.put("response", "r", "1")
        await store.aclose()
        assert await client.ping()
    finally:
        await client.aclose()


async def test_a_client_that_decodes_replies(redis_url: str, redis_prefix: str) -> None:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        store = RedisStateStore(client, prefix=redis_prefix)
        version = await store.put("response", "r", '"é"')
        assert await store.read("response", "r") is not None
        assert await store.take("response", "r") == '"é"'
        assert version > 0
        await store.append("mcp_event", "s", '"🧪"')
        assert await store.read_after("mcp_event", "s") == [(1, '"🧪"')]
        assert await store.wait_after("mcp_event", "s", 0, wait=1) == [(1, '"🧪"')]
    finally:
        await client.aclose()


async def test_a_wait_longer_than_the_socket_timeout_returns_empty(
    redis_url: str, redis_prefix: str
) -> None:
    client = aioredis.Redis.from_url(redis_url, socket_timeout=0.5)
    try:
        store = RedisStateStore(client, prefix=redis_prefix)
        started = time.monotonic()
        assert await store.wait_after("log", "s1", 0, wait=1.5) == []
        assert 1.4 < time.monotonic() - started < 3.0
        await store.append("log", "s1", '"e"')
        assert await store.wait_after("log", "s1", 0, wait=1.5) == [(1, '"e"')]
    finally:
        await client.aclose()
