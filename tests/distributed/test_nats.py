from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest

from daimon.core import TaskState
from daimon.distributed import Broker, BrokerError, broker_from_url
from daimon.distributed.brokers.nats import NatsBroker
from daimon.testing.brokers import BrokerConformance, broker_handles, sample_result, sample_task

from .conftest import PrivateServer, ServiceOutage

pytestmark = pytest.mark.service("nats")


async def drop(url: str, stream: str, bucket: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for name in (stream, f"{stream}_DEAD"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_key_value(bucket)
    finally:
        await nc.close()


@pytest.fixture
async def names(nats_url: str) -> AsyncIterator[dict[str, str]]:
    tag = uuid.uuid4().hex[:12]
    options = {"stream": f"T_{tag}", "bucket": f"t_{tag}"}
    yield options
    await drop(nats_url, options["stream"], options["bucket"])


class TestNatsBroker(BrokerConformance):
    @pytest.fixture
    async def make_broker(self, nats_url: str, names: dict[str, str]) -> AsyncIterator[Any]:
        async with broker_handles(
            lambda **options: NatsBroker.from_url(nats_url, **names, **options)
        ) as make:
            yield make

    @pytest.fixture
    async def outage(self, private_nats: PrivateServer) -> AsyncIterator[ServiceOutage]:
        url = f"nats://127.0.0.1:{private_nats.port}"
        async with broker_handles(
            lambda **options: NatsBroker.from_url(url, **{"timeout": 0.5, **options})
        ) as make:
            yield ServiceOutage(make, private_nats.stop, private_nats.start)


async def test_is_a_core_broker(nats_url: str, names: dict[str, str]) -> None:
    async with NatsBroker.from_url(nats_url, **names) as broker:
        assert isinstance(broker, Broker)
        core: Broker = broker
        assert core is broker
    made = broker_from_url(nats_url, lease=3.0, **names)
    assert isinstance(made, NatsBroker) and made.lease == 3.0
    await made.aclose()


async def test_dead_letters_go_to_the_dead_stream(nats_url: str, names: dict[str, str]) -> None:
    async with NatsBroker.from_url(nats_url, **names) as broker:
        await broker.submit(sample_task())
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        await delivery.fail("ValueError: nope")
        msg = await broker._js.get_last_msg(
            f"{names['stream']}_DEAD", f"{names['stream']}_DEAD.tasks"
        )
        assert msg.headers["Daimon-Error"] == "ValueError: nope"
        assert (await broker.status("task-1")).state is TaskState.FAILED


async def test_a_resubmit_after_a_lost_publish_queues_the_task(
    nats_url: str, names: dict[str, str]
) -> None:
    async with NatsBroker.from_url(nats_url, **names) as broker:
        kv = await broker._ready()
        from daimon.distributed.brokers.nats import _encode, _key
        from daimon.kit.task_records import TaskRecord

        await kv.create(_key("tasks", "task-1"), _encode(TaskRecord()))  # a submit that died here
        assert await broker.claim(wait=0.3) is None
        await broker.submit(sample_task())
        delivery = await broker.claim(wait=2)
        assert delivery is not None and await delivery.complete(sample_result())


async def test_a_task_over_max_payload_is_refused_and_leaves_no_record(
    nats_url: str, names: dict[str, str]
) -> None:
    """A task over the server's max_payload (1 MiB here) raises, and no pending task stays."""
    async with NatsBroker.from_url(nats_url, **names) as broker:
        with pytest.raises(BrokerError, match="'task-1' was not queued") as raised:
            await broker.submit(sample_task(input="x" * (2 * 1024 * 1024)))
        assert raised.value.task_id == "task-1"
        with pytest.raises(KeyError):
            await broker.status("task-1")
        assert await broker.submit(sample_task()) == "task-1"  # the id is free again
        delivery = await broker.claim(wait=2.0)
        assert delivery is not None and delivery.task.input == sample_task().input
