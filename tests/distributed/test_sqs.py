"""The SQS broker against moto's server (a local SQS emulator), task states in Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import botocore.config
import pytest

from daimon.core import BuilderError, TaskState
from daimon.distributed import Broker, BrokerError, broker_from_url
from daimon.distributed.brokers.redis import RedisTaskStore
from daimon.distributed.brokers.sqs import SqsBroker
from daimon.testing.brokers import BrokerConformance, broker_handles, sample_result, sample_task

from .conftest import SQS_CREDENTIALS as CREDENTIALS
from .conftest import RestartableProcess, ServiceOutage, start_moto_server, stop_moto_server

pytestmark = pytest.mark.service("redis")


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[str]:
    name = f"daimon-test-{uuid.uuid4().hex[:12]}"
    yield name
    async with RedisTaskStore.from_url(redis_url, queue=name, prefix="daimon-test:") as store:
        keys = [k async for k in store.client.scan_iter(match=f"daimon-test:{{{name}}}:*")]
        if keys:
            await store.client.delete(*keys)


def open_broker(endpoint: str, redis_url: str, queue: str, **options: Any) -> SqsBroker:
    store = RedisTaskStore.from_url(redis_url, queue=queue, prefix="daimon-test:")
    return SqsBroker(
        queue, store=store, endpoint_url=endpoint, own_store=True, **CREDENTIALS, **options
    )


class TestSqsBroker(BrokerConformance):
    # SQS counts visibility in whole seconds. A 1 s lease left the heartbeats (every third of
    # it, each a call to the moto server) 0.67 s of slack, which a loaded 2-core machine
    # sometimes ate: the lease lapsed and another worker claimed a task still beating.
    lease = 2.0

    @pytest.fixture
    async def make_broker(
        self, sqs_endpoint: str, redis_url: str, queue: str
    ) -> AsyncIterator[Any]:
        async with broker_handles(
            lambda **options: open_broker(
                sqs_endpoint, redis_url, queue, **{"lease": 30.0, **options}
            )
        ) as make:
            yield make

    @pytest.fixture
    async def outage(self, redis_url: str, queue: str) -> AsyncIterator[ServiceOutage]:
        """A moto server of this test's own, stopped and started again (empty: it keeps nothing;
        the task records are in Redis)."""
        moto = RestartableProcess(start_moto_server, stop_moto_server)
        moto.start()
        quick = botocore.config.Config(
            connect_timeout=0.5, read_timeout=1.0, retries={"max_attempts": 1}
        )
        endpoint = f"http://127.0.0.1:{moto.port}"
        try:
            async with broker_handles(
                lambda **options: open_broker(endpoint, redis_url, queue, config=quick, **options)
            ) as make:
                yield ServiceOutage(make, moto.stop, moto.start)
        finally:
            moto.stop()


async def test_is_a_core_broker(sqs_endpoint: str, redis_url: str, queue: str) -> None:
    async with open_broker(sqs_endpoint, redis_url, queue) as broker:
        assert isinstance(broker, Broker)
        core: Broker = broker
        assert core is broker


async def test_from_a_url(sqs_endpoint: str, redis_url: str, queue: str) -> None:
    host = sqs_endpoint.removeprefix("http://")
    broker = broker_from_url(f"sqs://{host}/{queue}", store=redis_url, lease=3, **CREDENTIALS)
    assert isinstance(broker, SqsBroker) and broker.lease == 3.0
    await broker.submit(sample_task())
    assert (await broker.status("task-1")).state is TaskState.PENDING
    await broker.aclose()
    with pytest.raises(BuilderError, match="needs a store"):
        broker_from_url(f"sqs://{queue}")
    with pytest.raises(BuilderError, match="at least 1 second"):
        broker_from_url(f"sqs://{queue}", store=redis_url, lease=0.5)


async def test_the_queue_option_overrides_the_urls(
    sqs_endpoint: str, redis_url: str, queue: str
) -> None:
    """``queue=`` (as ``daimon broker dead-letters --queue`` passes it) names the queue."""
    host = sqs_endpoint.removeprefix("http://")
    store = RedisTaskStore.from_url(redis_url, queue=queue, prefix="daimon-test:")
    broker = broker_from_url(
        f"sqs://{host}/other", queue=queue, store=store, own_store=True, **CREDENTIALS
    )
    assert isinstance(broker, SqsBroker)
    async with broker, open_broker(sqs_endpoint, redis_url, queue) as same:
        await broker.submit(sample_task())
        delivery = await same.claim(wait=5)
        assert delivery is not None and delivery.task.task_id == "task-1"
        assert await delivery.complete(sample_result())


async def test_handles_with_other_leases_share_a_queue(
    sqs_endpoint: str, redis_url: str, queue: str
) -> None:
    """SQS refuses CreateQueue with another visibility timeout: the queue is used as it is."""
    async with (
        open_broker(sqs_endpoint, redis_url, queue, lease=30) as client,
        open_broker(sqs_endpoint, redis_url, queue, lease=2) as worker,
    ):
        await client.submit(sample_task())
        delivery = await worker.claim(wait=2.0)
        assert delivery is not None and delivery.task.task_id == "task-1"
        assert await delivery.complete(sample_result())
        assert (await client.status("task-1")).result == sample_result()


async def test_a_task_over_the_size_limit_is_refused_and_leaves_no_record(
    sqs_endpoint: str, redis_url: str, queue: str
) -> None:
    """SQS refuses a message over the queue's size limit: submit raises, no pending task stays.

    The queue is made beforehand with a 1 KiB ``MaximumMessageSize`` (SQS allows 1 KiB to
    1 MiB); the broker uses it as it is.
    """
    from aiobotocore.session import get_session

    async with get_session().create_client(
        "sqs", region_name="us-east-1", endpoint_url=sqs_endpoint, **CREDENTIALS
    ) as sqs:
        await sqs.create_queue(QueueName=queue, Attributes={"MaximumMessageSize": "1024"})
    async with open_broker(sqs_endpoint, redis_url, queue) as broker:
        with pytest.raises(BrokerError, match=r"'task-1' was not queued.*shorter than") as raised:
            await broker.submit(sample_task(input="x" * 2048))
        assert raised.value.task_id == "task-1"
        with pytest.raises(KeyError):
            await broker.status("task-1")
        assert await broker.submit(sample_task()) == "task-1"  # the id is free again
        delivery = await broker.claim(wait=2.0)
        assert delivery is not None and delivery.task.input == sample_task().input
