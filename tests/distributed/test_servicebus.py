"""The Service Bus broker through the real ``azure-servicebus`` SDK, against a local fake.

No Service Bus emulator runs here (Microsoft's is Docker-only), so these tests point the
unchanged SDK at ``servicebus_fake.py``, a small AMQP 1.0 server with Service Bus's semantics
(peek-lock, lock renewal, dead-lettering), over real sockets; task states are in Redis.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient

from daimon import Agent, ChatRequest
from daimon.core import AgentTask, BuilderError, TaskState
from daimon.distributed import Broker, BrokerError, Worker, broker_from_url
from daimon.distributed.brokers.redis import RedisTaskStore
from daimon.distributed.brokers.servicebus import ServiceBusBroker
from daimon.models import FunctionModel
from daimon.testing.brokers import BrokerConformance, broker_handles, sample_result, sample_task

from .conftest import ServiceOutage

pytestmark = pytest.mark.service("redis")

LOCK = 1.5  # each test queue's LockDuration, and the brokers' lease


def _sibling(name: str) -> Any:
    """Import a helper module beside this file (tests/ is not a package)."""
    qualified = f"_daimon_tests_distributed_{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            qualified, Path(__file__).with_name(f"{name}.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


ServiceBusFake = _sibling("servicebus_fake").ServiceBusFake


@pytest.fixture(scope="module")
def fake() -> Iterator[Any]:
    with ServiceBusFake(lock_duration=LOCK) as server:
        yield server


@pytest.fixture
async def queue(fake: Any, redis_url: str) -> AsyncIterator[str]:
    name = f"daimon-test-{uuid.uuid4().hex[:12]}"
    fake.create_queue(name, lock_duration=LOCK, max_delivery_count=10)
    yield name
    async with RedisTaskStore.from_url(redis_url, queue=name, prefix="daimon-test:") as store:
        keys = [k async for k in store.client.scan_iter(match=f"daimon-test:{{{name}}}:*")]
        if keys:
            await store.client.delete(*keys)


def open_broker(fake: Any, redis_url: str, queue: str, **options: Any) -> ServiceBusBroker:
    store = RedisTaskStore.from_url(redis_url, queue=queue, prefix="daimon-test:")
    options.setdefault("lease", LOCK)
    return ServiceBusBroker(
        queue,
        store=store,
        connection_string=fake.connection_string,
        own_store=True,
        **options,
    )


class TestServiceBusBroker(BrokerConformance):
    lease = LOCK

    @pytest.fixture
    async def make_broker(self, fake: Any, redis_url: str, queue: str) -> AsyncIterator[Any]:
        async with broker_handles(
            lambda **options: open_broker(fake, redis_url, queue, **options)
        ) as make:
            yield make

    @pytest.fixture
    async def outage(self, redis_url: str, queue: str) -> AsyncIterator[Any]:
        """A fake of this test's own, stopped, then a new one on its port (it keeps nothing;
        the task records are in Redis)."""
        fakes = [ServiceBusFake(lock_duration=LOCK).start()]
        fakes[0].create_queue(queue, lock_duration=LOCK, max_delivery_count=10)

        def start() -> None:
            fakes.append(ServiceBusFake(fakes[0].port, lock_duration=LOCK).start())
            fakes[-1].create_queue(queue, lock_duration=LOCK, max_delivery_count=10)

        try:
            async with broker_handles(
                lambda **options: open_broker(
                    fakes[0], redis_url, queue, retry_total=0, try_timeout=1.0, **options
                )
            ) as make:
                yield ServiceOutage(make, lambda: fakes[-1].stop(), start)
        finally:
            for fake in fakes:
                fake.stop()


async def test_is_a_core_broker(fake: Any, redis_url: str, queue: str) -> None:
    async with open_broker(fake, redis_url, queue) as broker:
        assert isinstance(broker, Broker)
        core: Broker = broker
        assert core is broker


async def test_lock_renewal_keeps_a_long_task(fake: Any, redis_url: str, queue: str) -> None:
    """Heartbeats renew the Service Bus lock: a task outlives three lock durations, once."""
    async with (
        open_broker(fake, redis_url, queue) as holder,
        open_broker(fake, redis_url, queue) as other,
    ):
        await holder.submit(sample_task())
        delivery = await holder.claim(wait=2)
        assert delivery is not None
        for _ in range(9):
            await asyncio.sleep(LOCK / 3)
            assert await delivery.heartbeat() is True
            assert fake.counts(queue) == (0, 1)  # still locked, never back in the queue
        assert await other.claim(wait=0.2) is None
        assert await delivery.complete(sample_result()) is True
        assert fake.counts(queue) == (0, 0)  # completed on Service Bus: the lock was held
        assert (await other.status("task-1")).result == sample_result()


async def test_lock_expiry_redelivers(fake: Any, redis_url: str, queue: str) -> None:
    """A silent worker's lock expires; Service Bus delivers the task again as attempt 2."""
    async with (
        open_broker(fake, redis_url, queue) as silent,
        open_broker(fake, redis_url, queue) as rescuer,
    ):
        await silent.submit(sample_task())
        first = await silent.claim(wait=2)
        assert first is not None and first.task.attempt == 1
        second = await rescuer.claim(wait=LOCK * 4)
        assert second is not None and second.task.attempt == 2
        assert await first.heartbeat() is False  # the lock is lost, and the attempt is stale
        assert await second.complete(sample_result()) is True
        assert await first.complete(sample_result(output="stale")) is False
        assert (await rescuer.status("task-1")).result == sample_result()
        assert fake.counts(queue) == (0, 0)


@pytest.mark.timeout(90)
async def test_a_worker_renews_locks_while_it_claims_more(
    fake: Any, redis_url: str, queue: str
) -> None:
    """A worker on one handle: tasks longer than the lock run once, beside further claims."""
    runs: list[str] = []

    async def slow(request: ChatRequest) -> str:
        text = request.messages[-1].text
        runs.append(text)
        await asyncio.sleep(LOCK * 1.5)
        return f"done: {text}"

    async with open_broker(fake, redis_url, queue) as client:
        ids = [await client.submit(AgentTask(task_id=f"t{n}", input=f"t{n}")) for n in range(8)]
        handle = open_broker(fake, redis_url, queue)
        worker = Worker(Agent(FunctionModel(slow)), handle, concurrency=4, poll=0.2)
        running = asyncio.create_task(worker.run())
        try:
            for _ in range(200):
                states = [(await client.status(i)).state for i in ids]
                if all(state is TaskState.COMPLETED for state in states):
                    break
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)
            await handle.aclose()
        for task_id in ids:
            result = (await client.status(task_id)).result
            assert result is not None and result.output == f"done: {task_id}"
        assert sorted(runs) == sorted(ids)  # each ran once: no lock was lost
        assert fake.counts(queue) == (0, 0)


async def test_dead_letter_after_max_deliver_with_the_reason(
    fake: Any, redis_url: str, queue: str
) -> None:
    """After max_deliver failed attempts the message is in the dead-letter queue, saying why."""
    async with open_broker(fake, redis_url, queue, max_deliver=2) as broker:
        await broker.submit(sample_task())
        for n in (1, 2):
            delivery = await broker.claim(wait=2)
            assert delivery is not None and delivery.task.attempt == n
            assert await delivery.fail(f"ValueError: boom {n}", retry=True) is True
        assert await broker.claim(wait=0.3) is None
        status = await broker.status("task-1")
        assert status.state is TaskState.FAILED
        assert status.error == "dead-lettered after 2 attempts; last error: ValueError: boom 2"
    dead = await _dead_letters(fake, queue)
    assert [(m.message_id, m.dead_letter_reason) for m in dead] == [("task-1", "failed")]
    assert dead[0].dead_letter_error_description == status.error
    assert not dead[0].delivery_count  # 0: retries were sent as copies, not abandoned


async def test_lost_attempts_dead_letter_before_service_bus_does(
    fake: Any, redis_url: str, queue: str
) -> None:
    """Workers dying on a task: daimon dead-letters it after max_deliver lost locks."""
    async with open_broker(fake, redis_url, queue, max_deliver=2) as client:
        await client.submit(sample_task())
        for _ in range(2):
            worker = open_broker(fake, redis_url, queue, max_deliver=2)
            assert await worker.claim(wait=LOCK * 4) is not None
            await worker.aclose()  # dies holding the lock
        async with open_broker(fake, redis_url, queue, max_deliver=2) as survivor:
            assert await survivor.claim(wait=LOCK * 4) is None
        status = await client.status("task-1")
        assert status.state is TaskState.FAILED
        assert status.error is not None and "attempt 2 was lost" in status.error
    dead = await _dead_letters(fake, queue)
    assert [m.dead_letter_reason for m in dead] == ["attempts spent"]
    assert dead[0].dead_letter_error_description == status.error


async def test_a_message_that_is_not_a_task_is_dead_lettered(
    fake: Any, redis_url: str, queue: str
) -> None:
    """A message that is not a task goes to the dead-letter queue; a known task fails."""
    async with open_broker(fake, redis_url, queue) as broker:
        await broker.store.create("known")
        async with (
            ServiceBusClient.from_connection_string(fake.connection_string) as client,
            client.get_queue_sender(queue) as sender,
        ):
            await sender.send_messages(ServiceBusMessage("not json", message_id="odd"))
            await sender.send_messages(ServiceBusMessage("{}", message_id="known"))
        assert await broker.claim(wait=1) is None
        with pytest.raises(KeyError):
            await broker.status("odd")
        status = await broker.status("known")
        assert status.state is TaskState.FAILED
        assert status.error is not None and status.error.startswith("SerializationError")
    dead = await _dead_letters(fake, queue)
    assert sorted((m.message_id, m.dead_letter_reason) for m in dead) == [
        ("known", "failed"),
        ("odd", "not a task"),
    ]


async def test_a_dropped_connection_loses_nothing(fake: Any, redis_url: str, queue: str) -> None:
    """Service Bus closes connections at will: the SDK reconnects and every lock token holds."""
    fake.create_queue(queue, lock_duration=5.0)
    async with open_broker(fake, redis_url, queue, lease=5.0) as broker:
        await broker.submit(sample_task("a"))
        await broker.submit(sample_task("b"))
        held = await broker.claim(wait=2)
        assert held is not None and held.task.task_id == "a"
        fake.drop_connections()
        assert await held.heartbeat() is True  # renewed over a new connection
        assert await held.complete(sample_result("a")) is True  # by lock token: the link died
        fake.drop_connections()
        await broker.submit(sample_task("c"))  # sent once, over a new connection
        # A message the SDK had asked for on a dropped link stays locked until its lock ends.
        claimed = []
        for _ in range(2):
            delivery = await broker.claim(wait=8)
            assert delivery is not None
            claimed.append(delivery.task.task_id)
            assert await delivery.complete(sample_result(delivery.task.task_id)) is True
        assert sorted(claimed) == ["b", "c"]
        assert fake.counts(queue) == (0, 0)
        assert (await broker.status("a")).result == sample_result("a")


@pytest.mark.timeout(120)
async def test_connections_dropped_under_load_lose_no_task(
    fake: Any, redis_url: str, queue: str
) -> None:
    """Connections dropped while tasks are submitted and run: each task gets one result."""
    fake.create_queue(queue, lock_duration=10.0)

    async def quick(request: ChatRequest) -> str:
        await asyncio.sleep(0.05)
        return f"done: {request.messages[-1].text}"

    ids = [f"t{n}" for n in range(40)]
    async with open_broker(fake, redis_url, queue, lease=10.0) as client:
        handle = open_broker(fake, redis_url, queue, lease=10.0)
        worker = Worker(Agent(FunctionModel(quick)), handle, concurrency=4, poll=0.2)
        running = asyncio.create_task(worker.run())
        try:
            for n, task_id in enumerate(ids):
                await client.submit(AgentTask(task_id=task_id, input=task_id))
                if n % 10 == 5:
                    fake.drop_connections()
            for _ in range(600):
                states = [(await client.status(i)).state for i in ids]
                if all(state is TaskState.COMPLETED for state in states):
                    break
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)
            await handle.aclose()
        for task_id in ids:
            result = (await client.status(task_id)).result
            assert result is not None and result.output == f"done: {task_id}"
        assert worker.completed == len(ids)


async def _dead_letters(fake: Any, queue: str) -> list[Any]:
    """Everything in the queue's dead-letter queue, read (and removed) through the SDK."""
    async with ServiceBusClient.from_connection_string(fake.connection_string) as client:
        receiver = client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        async with receiver:
            messages = await receiver.receive_messages(max_message_count=10, max_wait_time=1)
            for message in messages:
                await receiver.complete_message(message)
            return list(messages)


async def test_from_a_url(fake: Any, redis_url: str, queue: str) -> None:
    url = f"sb://127.0.0.1:{fake.port}?emulator=true&lease={LOCK}&max_deliver=3"
    broker = broker_from_url(url, store=redis_url, queue=queue)
    assert isinstance(broker, ServiceBusBroker)
    assert (broker.lease, broker.max_deliver) == (LOCK, 3)
    try:
        await broker.submit(sample_task())
        assert (await broker.status("task-1")).state is TaskState.PENDING
        delivery = await broker.claim(wait=2)
        assert delivery is not None and await delivery.complete(sample_result())
    finally:
        store: Any = broker.store
        await store.client.delete(store.key("task-1"))
        await broker.aclose()


def test_bad_options_are_builder_errors(redis_url: str) -> None:
    store = RedisTaskStore.from_url(redis_url, queue="q", prefix="daimon-test:")
    with pytest.raises(BuilderError, match="needs a store"):
        broker_from_url("sb://ns.servicebus.windows.net/q")
    with pytest.raises(BuilderError, match="names a namespace and a queue"):
        broker_from_url("sb://ns.servicebus.windows.net/", store=store)
    with pytest.raises(BuilderError, match="the URL names queue 'q', the options 'r'"):
        broker_from_url("sb://ns.servicebus.windows.net/q", store=store, queue="r")
    with pytest.raises(BuilderError, match="a connection_string, or a namespace and a credential"):
        broker_from_url("sb://ns.servicebus.windows.net/q", store=store)
    with pytest.raises(BuilderError, match=r"lease in 'sb://ns/q\?lease=soon' is not a number"):
        broker_from_url("sb://ns/q?lease=soon", store=store, credential=object())
    with pytest.raises(BuilderError, match="MaxDeliveryCount"):
        ServiceBusBroker("q", store=store, connection_string="x", max_deliver=10)
    with pytest.raises(BuilderError, match="at most 300s"):
        ServiceBusBroker("q", store=store, connection_string="x", lease=600)


def test_a_missing_sdk_names_the_servicebus_extra(
    import_without: Callable[[str, str], tuple[str, str, str]],
) -> None:
    extra, _, message = import_without("daimon.distributed.brokers.servicebus", "azure.servicebus")
    assert extra == "servicebus"
    assert 'pip install "daimon-agents[servicebus]"' in message


async def test_a_task_over_the_size_limit_is_refused_and_leaves_no_record(
    fake: Any, redis_url: str, queue: str
) -> None:
    """A message over the link's 256 KiB limit is refused: submit raises, no pending task stays."""
    async with open_broker(fake, redis_url, queue) as broker:
        with pytest.raises(BrokerError, match="'task-1' was not queued") as raised:
            await broker.submit(sample_task(input="x" * (300 * 1024)))
        assert raised.value.task_id == "task-1"
        with pytest.raises(KeyError):
            await broker.status("task-1")
        assert await broker.submit(sample_task()) == "task-1"  # the id is free again
        delivery = await broker.claim(wait=5.0)
        assert delivery is not None and delivery.task.input == sample_task().input
        assert await delivery.complete(sample_result())
