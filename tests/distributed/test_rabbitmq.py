from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest

from daimon.core import BuilderError, TaskState
from daimon.distributed import Broker, broker_from_url
from daimon.distributed.brokers.rabbitmq import RabbitMQBroker
from daimon.distributed.brokers.redis import RedisTaskStore
from daimon.testing.brokers import BrokerConformance, broker_handles, sample_task

from .conftest import ClosedPortOutage

pytestmark = [pytest.mark.service("rabbitmq"), pytest.mark.service("redis")]


async def drop(rabbitmq_url: str, redis_url: str, queue: str) -> None:
    connection = await aio_pika.connect(rabbitmq_url)
    async with connection:
        channel = await connection.channel()
        for name in (queue, f"{queue}.delay", f"{queue}.dead"):
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dlx")
    async with RedisTaskStore.from_url(redis_url, queue=queue, prefix="daimon-test:") as store:
        keys = [k async for k in store.client.scan_iter(match=f"daimon-test:{{{queue}}}:*")]
        if keys:
            await store.client.delete(*keys)


@pytest.fixture
async def queue(rabbitmq_url: str, redis_url: str) -> AsyncIterator[str]:
    name = f"daimon-test.{uuid.uuid4().hex[:12]}"
    yield name
    await drop(rabbitmq_url, redis_url, name)


def open_broker(rabbitmq_url: str, redis_url: str, queue: str, **options: Any) -> RabbitMQBroker:
    store = RedisTaskStore.from_url(redis_url, queue=queue, prefix="daimon-test:")
    return RabbitMQBroker.from_url(
        rabbitmq_url, store=store, queue=queue, own_store=True, **options
    )


class TestRabbitMQBroker(BrokerConformance):
    redelivers_when_lease_expires = False

    @pytest.fixture
    async def make_broker(
        self, rabbitmq_url: str, redis_url: str, queue: str
    ) -> AsyncIterator[Any]:
        async with broker_handles(
            lambda **options: open_broker(rabbitmq_url, redis_url, queue, **options)
        ) as make:
            yield make

    @pytest.fixture
    async def outage(
        self, rabbitmq_url: str, redis_url: str, queue: str
    ) -> AsyncIterator[ClosedPortOutage]:
        """The shared RabbitMQ cannot be stopped: "down" handles get a closed port instead."""
        async with broker_handles(
            lambda url, **options: open_broker(url, redis_url, queue, **options)
        ) as make:
            yield ClosedPortOutage(make, rabbitmq_url)


async def test_is_a_core_broker(rabbitmq_url: str, redis_url: str, queue: str) -> None:
    async with open_broker(rabbitmq_url, redis_url, queue) as broker:
        assert isinstance(broker, Broker)
        core: Broker = broker
        assert core is broker


async def test_from_a_url_with_a_store_url(rabbitmq_url: str, redis_url: str, queue: str) -> None:
    broker = broker_from_url(rabbitmq_url, store=redis_url, queue=queue, lease=3.0)
    assert isinstance(broker, RabbitMQBroker) and broker.lease == 3.0
    assert isinstance(broker.store, RedisTaskStore)
    await broker.aclose()
    with pytest.raises(BuilderError, match="needs a store"):
        broker_from_url(rabbitmq_url)


async def test_dead_letters_go_to_the_dead_queue(
    rabbitmq_url: str, redis_url: str, queue: str
) -> None:
    async with open_broker(rabbitmq_url, redis_url, queue) as broker:
        await broker.submit(sample_task())
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        assert await delivery.fail("ValueError: nope")
        assert (await broker.status("task-1")).state is TaskState.FAILED
        # Already there, no waiting: fail() returns after RabbitMQ confirmed the dead letter.
        dead = await broker._channel.get_queue(f"{queue}.dead")
        message = await dead.get(fail=False)
        assert message is not None and message.message_id == "task-1"
        assert (message.headers or {})["x-daimon-reason"] == "ValueError: nope"
        await message.ack()
        assert await dead.get(fail=False) is None  # one copy, and the task message was acked
        assert await broker.claim(wait=0.2) is None


async def test_a_dead_letter_that_cannot_be_published_goes_through_the_dlx(
    rabbitmq_url: str, redis_url: str, queue: str
) -> None:
    """With ``<queue>.dead`` gone, the copy comes back unroutable: the task is rejected instead."""
    async with open_broker(rabbitmq_url, redis_url, queue) as broker:
        await broker.submit(sample_task())
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        channel = broker._channel
        await channel.queue_delete(f"{queue}.dead")
        spare = await channel.declare_queue(exclusive=True)
        await spare.bind(f"{queue}.dlx")
        assert await delivery.fail("ValueError: nope")
        message = None
        for _ in range(50):  # RabbitMQ's own dead-lettering is asynchronous: wait for it
            message = await spare.get(fail=False)
            if message is not None:
                break
            await asyncio.sleep(0.1)
        assert message is not None and message.message_id == "task-1"
        assert message.headers["x-death"][0]["reason"] == "rejected"
        await message.ack()
        assert await broker.claim(wait=0.2) is None
