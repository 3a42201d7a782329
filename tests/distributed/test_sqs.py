"""The SQS broker against moto's server (a local SQS emulator), task states in Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from daimon.core import BuilderError, TaskBroker, TaskState
from daimon.distributed import Broker, broker_from_url
from daimon.distributed.brokers.redis import RedisTaskStore
from daimon.distributed.brokers.sqs import SqsBroker
from daimon.testing.brokers import BrokerConformance, sample_task

pytestmark = pytest.mark.service("redis")

CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}


@pytest.fixture(scope="module")
def sqs_endpoint() -> Iterator[str]:
    # The venv's own script first: pytest may run from .venv/bin without that folder on PATH.
    beside = Path(sys.executable).with_name("moto_server")
    binary = str(beside) if beside.exists() else shutil.which("moto_server")
    if binary is None:
        pytest.fail("moto_server is not installed: pip install -e '.[dev]' brings moto[server]")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), 0.2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "moto_server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


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
    lease = 1.0  # SQS counts visibility in whole seconds

    @pytest.fixture
    async def make_broker(
        self, sqs_endpoint: str, redis_url: str, queue: str
    ) -> AsyncIterator[Any]:
        handles: list[SqsBroker] = []

        async def make(**options: Any) -> SqsBroker:
            options.setdefault("lease", 30.0)
            handles.append(open_broker(sqs_endpoint, redis_url, queue, **options))
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


async def test_is_a_broker_and_a_core_task_broker(
    sqs_endpoint: str, redis_url: str, queue: str
) -> None:
    async with open_broker(sqs_endpoint, redis_url, queue) as broker:
        assert isinstance(broker, Broker)
        core: TaskBroker = broker
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
