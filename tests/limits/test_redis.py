"""RedisLimitStore against the limit-store conformance suite, and its keys' expiry."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from daimon.core.limits import LimitStore, RateLimits
from daimon.limits import Limiter
from daimon.limits.redis import RedisLimitStore
from daimon.testing.limits import LimitStoreConformance, ticket

pytestmark = pytest.mark.service("redis")


class TestRedisLimitStore(LimitStoreConformance):
    @pytest.fixture
    async def make_store(
        self, redis_url: str, redis_prefix: str
    ) -> AsyncIterator[Callable[..., Awaitable[LimitStore]]]:
        """Each handle on its own connection, as another process would be."""
        handles: list[RedisLimitStore] = []

        async def make(**options: Any) -> LimitStore:
            handles.append(RedisLimitStore(redis_url, prefix=redis_prefix, **options))
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


async def test_every_key_expires_on_its_own(redis_url: str, redis_prefix: str) -> None:
    """Buckets, queue, admissions and slots all carry an expiry matching their use."""
    async with RedisLimitStore(redis_url, prefix=redis_prefix, waiter_ttl=1.5) as store:
        limits = RateLimits(requests_per_minute=1, concurrent=1, period=2.0)
        started = time.monotonic()
        assert await store.reserve("k", limits, ticket()) == 0.0
        assert await store.reserve("k", limits, ticket()) > 0
        client = store._client
        ttls = {}
        async for name in client.scan_iter(match=f"{redis_prefix}*"):
            ttls[name.decode().rpartition(":")[2]] = await client.pttl(name)
        elapsed = (time.monotonic() - started) * 1000  # the expiries ran down meanwhile

    def within(ttl: int, set_to: int) -> bool:
        return set_to - elapsed - 20 <= ttl <= set_to

    assert set(ttls) == {"b", "w", "r", "a", "t", "c"}
    assert within(ttls["b"], 4_000)  # empty: full again in one period, kept one more
    assert within(ttls["w"], 1_500) and within(ttls["r"], 1_500)
    assert all(within(ttls[name], 10_000) for name in "atc")  # 5 * period


async def test_keys_of_one_limit_key_share_a_hash_tag(redis_url: str, redis_prefix: str) -> None:
    async with RedisLimitStore(redis_url, prefix=redis_prefix) as store:
        assert store._keys("openai:team-a", "b", "w") == [
            f"{redis_prefix}{{openai:team-a}}:b",
            f"{redis_prefix}{{openai:team-a}}:w",
        ]


async def test_the_limiter_opens_it_from_a_url(redis_url: str, redis_prefix: str) -> None:
    limiter = Limiter.from_url(
        redis_url, RateLimits(requests_per_minute=5), prefix=redis_prefix, waiter_ttl=1.0
    )
    try:
        assert isinstance(limiter.store, RedisLimitStore)
        async with limiter.slot("k", input_tokens=10) as slot:
            slot.settle(12, 3)
    finally:
        await limiter.aclose()
