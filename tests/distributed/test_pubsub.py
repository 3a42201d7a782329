"""The Pub/Sub broker against Google's Pub/Sub emulator (started by the tests), states in Redis."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daimon.core import BuilderError, TaskState
from daimon.distributed import Broker, broker_from_url
from daimon.distributed.brokers.pubsub import PubSubBroker
from daimon.distributed.brokers.redis import RedisTaskStore
from daimon.testing.brokers import BrokerConformance, broker_handles, sample_result, sample_task

from .conftest import RestartableProcess, ServiceOutage, start_pubsub_emulator, stop_pubsub_emulator

pytestmark = pytest.mark.service("redis")

PROJECT = "daimon-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[str]:
    name = f"daimon-test-{uuid.uuid4().hex[:12]}"
    yield name
    async with RedisTaskStore.from_url(redis_url, queue=name, prefix="daimon-test:") as store:
        keys = [k async for k in store.client.scan_iter(match=f"daimon-test:{{{name}}}:*")]
        if keys:
            await store.client.delete(*keys)


def open_broker(emulator: str, redis_url: str, queue: str, **options: Any) -> PubSubBroker:
    store = RedisTaskStore.from_url(redis_url, queue=queue, prefix="daimon-test:")
    return PubSubBroker(
        PROJECT, queue, store=store, emulator_host=emulator, own_store=True, **options
    )


class TestPubSubBroker(BrokerConformance):
    lease = 1.0  # Pub/Sub counts ack deadlines in whole seconds

    @pytest.fixture
    async def make_broker(
        self, pubsub_emulator: str, redis_url: str, queue: str
    ) -> AsyncIterator[Any]:
        async with broker_handles(
            lambda **options: open_broker(
                pubsub_emulator, redis_url, queue, **{"lease": 30.0, **options}
            )
        ) as make:
            yield make

    @pytest.fixture
    async def outage(self, redis_url: str, queue: str) -> AsyncIterator[ServiceOutage]:
        """An emulator of this test's own, stopped and started again (it keeps nothing; the
        task records are in Redis)."""
        emulator = RestartableProcess(start_pubsub_emulator, stop_pubsub_emulator)
        host = f"127.0.0.1:{emulator.port}"

        async def start() -> None:
            # A Java emulator that just opened its port may take seconds to answer its first
            # calls: the handles' short timeout is for the outage, so warm it up first.
            emulator.start()
            async with open_broker(host, redis_url, queue, timeout=30.0) as warm:
                await warm.setup()

        await start()
        try:
            async with broker_handles(
                lambda **options: open_broker(host, redis_url, queue, timeout=1.0, **options)
            ) as make:
                yield ServiceOutage(make, emulator.stop, start)
        finally:
            emulator.stop()


async def test_is_a_core_broker(pubsub_emulator: str, redis_url: str, queue: str) -> None:
    async with open_broker(pubsub_emulator, redis_url, queue) as broker:
        assert isinstance(broker, Broker)
        core: Broker = broker
        assert core is broker


async def test_from_a_url(
    pubsub_emulator: str, redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator)  # how the SDKs find an emulator
    broker = broker_from_url(f"pubsub://{PROJECT}/{queue}?lease=3", store=redis_url)
    assert isinstance(broker, PubSubBroker) and broker.lease == 3.0
    await broker.submit(sample_task())
    assert (await broker.status("task-1")).state is TaskState.PENDING
    await broker.aclose()
    with pytest.raises(BuilderError, match="needs a store"):
        broker_from_url(f"pubsub://{PROJECT}/{queue}")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"lease": 0.5}, "1 to 600 seconds"),
        ({"lease": 601}, "1 to 600 seconds"),
        ({"policy_attempts": 4}, "5 to 100"),
        ({"max_deliver": 0}, "max_deliver"),
        ({"queue": "ab"}, "3 to 255"),
        ({"queue": "goog-tasks"}, "not goog"),
    ],
)
def test_bad_options_are_builder_errors(options: dict[str, Any], match: str) -> None:
    queue = options.pop("queue", "tasks")
    with pytest.raises(BuilderError, match=match):
        PubSubBroker(PROJECT, queue, store=None, **options)  # type: ignore[arg-type]


async def test_the_subscription_has_a_dead_letter_policy(
    pubsub_emulator: str, redis_url: str, queue: str
) -> None:
    async with open_broker(pubsub_emulator, redis_url, queue, lease=12) as broker:
        await broker.setup()
        sub = await broker._subscriber.get_subscription(subscription=broker.subscription)
    assert sub.ack_deadline_seconds == 12
    assert sub.dead_letter_policy.dead_letter_topic == f"projects/{PROJECT}/topics/{queue}-dead"
    assert sub.dead_letter_policy.max_delivery_attempts == 100


async def test_max_deliver_below_five_is_kept_by_the_store(
    pubsub_emulator: str, redis_url: str, queue: str
) -> None:
    """Pub/Sub's policy cannot go below 5 attempts; the store's count dead-letters after 2."""
    async with open_broker(pubsub_emulator, redis_url, queue, lease=5, max_deliver=2) as broker:
        await broker.submit(sample_task())
        for attempt in (1, 2):
            delivery = await broker.claim(wait=5)
            assert delivery is not None and delivery.task.attempt == attempt
            assert await delivery.fail(f"boom {attempt}", retry=True)
        status = await broker.status("task-1")
        assert status.state is TaskState.FAILED
        assert status.error == "dead-lettered after 2 attempts; last error: boom 2"
        assert await broker.claim(wait=1.5) is None
        dead: list[Any] = []
        for _ in range(10):  # the emulator may answer a pull empty before the message is there
            reply = await broker._subscriber.pull(
                request={"subscription": broker.dead_subscription, "max_messages": 5}, timeout=5
            )
            dead += reply.received_messages
            if dead:
                break
    assert len(dead) == 1
    assert dead[0].message.attributes["error"] == status.error
    assert b'"task_id":"task-1"' in dead[0].message.data.replace(b" ", b"")


async def test_a_heartbeat_extends_the_ack_deadline(
    pubsub_emulator: str, redis_url: str, queue: str
) -> None:
    async with (
        open_broker(pubsub_emulator, redis_url, queue, lease=1) as worker,
        open_broker(pubsub_emulator, redis_url, queue, lease=1) as other,
    ):
        await worker.submit(sample_task())
        delivery = await worker.claim(wait=5)
        assert delivery is not None
        for _ in range(5):  # 2.5 s: past the 1 s lease but for the heartbeats
            assert await delivery.heartbeat()
            assert await other.claim(wait=0.5) is None
        assert await delivery.complete(sample_result())
        assert await other.claim(wait=1.5) is None


async def test_a_deleted_subscription_is_created_again(
    pubsub_emulator: str, redis_url: str, queue: str
) -> None:
    async with open_broker(pubsub_emulator, redis_url, queue) as broker:
        await broker.setup()
        await broker._subscriber.delete_subscription(subscription=broker.subscription)
        assert await broker.claim(wait=0.5) is None  # recreates it
        await broker.submit(sample_task())
        delivery = await broker.claim(wait=5)
        assert delivery is not None and await delivery.complete(sample_result())


@pytest.mark.timeout(120)
async def test_an_emulator_restart_loses_its_messages_and_a_resubmit_recovers(
    pubsub_emulators: Any, redis_url: str, queue: str
) -> None:
    """The emulator keeps everything in memory: a restart drops topics, subscriptions, messages.

    The broker creates its topic and subscription again on the next call, and submitting a
    task that is still pending (never started) publishes it again.
    """
    port = free_port()
    emulator = await asyncio.to_thread(pubsub_emulators.start, port)
    try:
        async with open_broker(f"127.0.0.1:{port}", redis_url, queue, lease=5) as broker:
            await broker.submit(sample_task("before"))
            await asyncio.to_thread(pubsub_emulators.stop, emulator)
            emulator = await asyncio.to_thread(pubsub_emulators.start, port)
            await broker.submit(sample_task("after"))  # the topic is gone: made again
            delivery = await broker.claim(wait=10)
            assert delivery is not None and delivery.task.task_id == "after"
            assert await delivery.complete(sample_result("after"))
            assert await broker.claim(wait=1) is None  # "before" was lost with the emulator
            assert (await broker.status("before")).state is TaskState.PENDING
            await broker.submit(sample_task("before"))  # pending, never started: published again
            delivery = await broker.claim(wait=10)
            assert delivery is not None and delivery.task.task_id == "before"
            assert await delivery.complete(sample_result("before"))
    finally:
        await asyncio.to_thread(pubsub_emulators.stop, emulator)


async def test_the_emulator_honours_the_dead_letter_policy_backstop(
    pubsub_emulator: str, redis_url: str, queue: str
) -> None:
    """A message nobody settles is moved by Pub/Sub itself after ``policy_attempts`` deliveries."""
    async with open_broker(pubsub_emulator, redis_url, queue, policy_attempts=5) as broker:
        await broker.setup()
        await broker._publish(broker._topic, "not a task", {"task_id": "stray"})
        attempts = []
        for _ in range(20):
            reply = await broker._subscriber.pull(
                request={"subscription": broker.subscription, "max_messages": 1}, timeout=5
            )
            for received in reply.received_messages:
                attempts.append(received.delivery_attempt)
                await broker._extend(received.ack_id, 0)  # a nack: delivered again at once
            if len(attempts) == 5:
                break
        assert attempts == [1, 2, 3, 4, 5]
        # The emulator moves the message when it would deliver it a sixth time.
        reply = await broker._subscriber.pull(
            request={"subscription": broker.subscription, "max_messages": 1}, timeout=5
        )
        assert not reply.received_messages
        dead: list[Any] = []
        for _ in range(10):
            reply = await broker._subscriber.pull(
                request={"subscription": broker.dead_subscription, "max_messages": 1}, timeout=5
            )
            dead += reply.received_messages
            if dead:
                break
    assert dead[0].message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert dead[0].message.data == b"not a task"
