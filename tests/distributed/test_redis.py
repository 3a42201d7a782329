from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from daimon.core import TaskState
from daimon.distributed import Broker, broker_from_url
from daimon.distributed.brokers.redis import RedisBroker, RedisTaskStore
from daimon.testing.brokers import (
    BrokerConformance,
    TaskStoreConformance,
    broker_handles,
    sample_result,
    sample_task,
)

from .conftest import PrivateServer, ServiceOutage

pytestmark = pytest.mark.service("redis")


async def drop_queue(url: str, queue: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(match=f"daimon-test:{{{queue}}}:*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[str]:
    name = uuid.uuid4().hex
    yield name
    await drop_queue(redis_url, name)


class TestRedisBroker(BrokerConformance):
    @pytest.fixture
    async def make_broker(self, redis_url: str, queue: str) -> AsyncIterator[Any]:
        async with broker_handles(
            lambda **options: RedisBroker.from_url(
                redis_url, queue=queue, prefix="daimon-test:", **options
            )
        ) as make:
            yield make

    @pytest.fixture
    async def outage(self, private_redis: PrivateServer) -> AsyncIterator[ServiceOutage]:
        url = f"redis://127.0.0.1:{private_redis.port}/0"
        async with broker_handles(lambda **options: RedisBroker.from_url(url, **options)) as make:
            yield ServiceOutage(make, private_redis.stop, private_redis.start)


async def test_is_a_core_broker(redis_url: str, queue: str) -> None:
    async with RedisBroker.from_url(redis_url, queue=queue, prefix="daimon-test:") as broker:
        assert isinstance(broker, Broker)
        core: Broker = broker
        assert core is broker
    made = broker_from_url(redis_url, queue=queue, prefix="daimon-test:", lease=3.0)
    assert isinstance(made, RedisBroker) and made.lease == 3.0
    await made.aclose()


async def test_keys_live_under_the_prefix_and_results_expire(redis_url: str, queue: str) -> None:
    async with RedisBroker.from_url(
        redis_url, queue=queue, prefix="daimon-test:", result_ttl=30
    ) as broker:
        await broker.submit(sample_task())
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        assert await delivery.complete(sample_result())
        client = broker._client
        keys = sorted([k async for k in client.scan_iter(match=f"daimon-test:{{{queue}}}:*")])
        base = f"daimon-test:{{{queue}}}:"
        assert keys == [f"{base}stream".encode(), f"{base}t:task-1".encode()]
        assert 0 < await client.pttl(f"{base}t:task-1") <= 30_000
        assert await client.xlen(broker.stream) == 0  # settled entries are deleted


async def test_dead_letters_are_kept_with_why(redis_url: str, queue: str) -> None:
    async with RedisBroker.from_url(redis_url, queue=queue, prefix="daimon-test:") as broker:
        await broker.submit(sample_task())
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        await delivery.fail("ValueError: nope")
        [dead] = await broker.dead_letters()
        assert (dead.task, dead.reason, dead.attempts) == (sample_task(), "ValueError: nope", 1)
        assert abs(dead.dead_at - time.time()) < 60


async def test_an_unreadable_task_is_dead_lettered(redis_url: str, queue: str) -> None:
    async with RedisBroker.from_url(redis_url, queue=queue, prefix="daimon-test:") as broker:
        await broker.setup()
        base = f"daimon-test:{{{queue}}}:"
        await broker._client.hset(
            f"{base}t:evil", mapping={"state": "pending", "attempt": 0, "released": 0, "lease": 0}
        )
        await broker._client.xadd(broker.stream, {"id": "evil", "task": '{"py/object": "os"}'})
        assert await broker.claim(wait=0.5) is None
        status = await broker.status("evil")
        assert status.state is TaskState.FAILED
        assert status.error is not None and status.error.startswith("SerializationError")


class TestRedisTaskStore(TaskStoreConformance):
    @pytest.fixture
    async def make_store(self, redis_url: str, queue: str) -> AsyncIterator[Any]:
        stores: list[RedisTaskStore] = []

        async def make() -> RedisTaskStore:
            stores.append(RedisTaskStore.from_url(redis_url, queue=queue, prefix="daimon-test:"))
            return stores[-1]

        yield make
        for store in stores:
            await store.aclose()


async def test_task_store_on_its_own(redis_url: str, queue: str) -> None:
    async with RedisTaskStore.from_url(redis_url, queue=queue, prefix="daimon-test:") as store:
        assert await store.create("t") is True
        assert await store.create("t") is False
        assert (await store.status("t")).state is TaskState.PENDING
        assert await store.begin("t", lease=5, max_deliver=2) == ("run", 1)
        outcome, left = await store.begin("t", lease=5, max_deliver=2)
        assert outcome == "busy" and 4 < left <= 5
        assert await store.heartbeat("t", 1, lease=5) == "ok"
        assert await store.settle("t", 1, "retry", error="boom", max_deliver=2) == "requeued"
        assert await store.begin("t", lease=5, max_deliver=2) == ("run", 2)
        assert (
            await store.settle("t", 1, "complete", result=sample_result("t"), max_deliver=2)
            == "stale"
        )
        assert (
            await store.settle("t", 2, "complete", result=sample_result("t"), max_deliver=2) == "ok"
        )
        assert (await store.status("t")).result == sample_result("t")
        assert await store.cancel("t") is False
        with pytest.raises(KeyError):
            await store.status("nope")
