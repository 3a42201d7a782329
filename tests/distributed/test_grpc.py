"""The gRPC broker: its service in a process of its own, clients over real sockets."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from daimon.core import BuilderError, SerializationError, TaskResult, TaskState
from daimon.distributed import Broker, broker_from_url
from daimon.distributed.brokers.grpc import GrpcBroker, GrpcBrokerError, GrpcBrokerServer
from daimon.testing.brokers import BrokerConformance, broker_handles, sample_result, sample_task

from .conftest import ServiceOutage


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            assert proc.poll() is None, f"the broker service exited with {proc.returncode}"
            assert time.monotonic() < deadline, "the broker service did not start"
            time.sleep(0.05)


def start_service(argv: list[str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(port, proc)
    return proc


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m daimon.distributed.brokers.grpc`` on a free port; its ``host:port``."""
    port = free_port()
    db = tmp_path_factory.mktemp("grpc") / "tasks.db"
    argv = [sys.executable, "-m", "daimon.distributed.brokers.grpc", "--db", str(db)]
    proc = start_service([*argv, "--port", str(port), "--synchronous", "NORMAL"], port)
    yield f"127.0.0.1:{port}"
    stop_service(proc)


@pytest.fixture
def queue() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


class TestGrpcBroker(BrokerConformance):
    @pytest.fixture
    async def make_broker(self, service: str, queue: str) -> AsyncIterator[Any]:
        async with broker_handles(
            lambda **options: GrpcBroker(service, queue=queue, **options)
        ) as make:
            yield make

    @pytest.fixture
    async def outage(self, tmp_path: Path) -> AsyncIterator[ServiceOutage]:
        """A service of this test's own, stopped and started again on its port and file."""
        db, port = tmp_path / "tasks.db", free_port()
        servers = [GrpcBrokerServer(db, port=port)]
        await servers[0].start()

        async def start() -> None:
            servers.append(GrpcBrokerServer(db, port=port))
            await servers[-1].start()

        try:
            async with broker_handles(
                lambda **options: GrpcBroker(f"127.0.0.1:{port}", timeout=1.0, **options)
            ) as make:
                yield ServiceOutage(make, lambda: servers[-1].stop(), start)
        finally:
            for server in servers:
                await server.stop()


async def test_is_a_core_broker(service: str) -> None:
    async with GrpcBroker(service) as broker:
        assert isinstance(broker, Broker)
        core: Broker = broker
        assert core is broker


async def test_from_a_url(service: str, queue: str) -> None:
    broker = broker_from_url(f"grpc://{service}?queue={queue}&max_deliver=2", lease=3)
    assert isinstance(broker, GrpcBroker)
    assert (broker.lease, broker.max_deliver) == (3.0, 2)
    await broker.submit(sample_task())
    assert (await broker.status("task-1")).state is TaskState.PENDING
    await broker.aclose()
    with pytest.raises(BuilderError, match="not a gRPC broker URL"):
        GrpcBroker.from_url("grpc://")


@pytest.mark.parametrize(
    "options", [{"lease": 0}, {"max_deliver": 0}, {"timeout": 0}, {"queue": ""}]
)
def test_bad_options_are_builder_errors(options: dict[str, Any]) -> None:
    with pytest.raises(BuilderError):
        GrpcBroker("127.0.0.1:1", **options)


async def test_queues_do_not_meet(service: str, queue: str) -> None:
    async with GrpcBroker(service, queue=queue) as a, GrpcBroker(service, queue=f"{queue}-b") as b:
        await a.submit(sample_task())
        with pytest.raises(KeyError):
            await b.status("task-1")
        assert await b.claim(wait=0.1) is None


async def test_a_body_that_is_not_daimon_json_is_invalid_argument(service: str) -> None:
    async with grpc.aio.insecure_channel(service) as channel:
        call = channel.unary_unary("/daimon.broker.v1.Broker/Submit")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(b'{"daimon": 1, "data": {"queue": "q", "task": {"py/object": "os"}}}')
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert ("daimon-error", "SerializationError") in tuple(caught.value.trailing_metadata() or ())


async def test_unknown_method_is_unimplemented(service: str) -> None:
    async with grpc.aio.insecure_channel(service) as channel:
        call = channel.unary_unary("/daimon.broker.v1.Broker/Nope")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(b"{}")
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_unstorable_result_is_refused_before_sending(service: str, queue: str) -> None:
    async with GrpcBroker(service, queue=queue) as broker:
        await broker.submit(sample_task())
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        with pytest.raises(SerializationError):  # NaN is not JSON
            await delivery.complete(TaskResult(task_id="task-1", output="x", cost=float("nan")))
        assert await delivery.complete(sample_result())


async def test_a_service_that_is_down_is_a_retryable_broker_error() -> None:
    async with GrpcBroker(f"127.0.0.1:{free_port()}", timeout=0.5) as broker:
        with pytest.raises(GrpcBrokerError) as caught:
            await broker.status("task-1")
    assert caught.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
    assert caught.value.retryable


async def test_token_is_required_when_set(tmp_path: Path) -> None:
    server = GrpcBrokerServer(tmp_path / "tasks.db", port=0, token="s3cret")
    async with server:
        async with GrpcBroker(server.target, timeout=5) as anonymous:
            with pytest.raises(GrpcBrokerError) as caught:
                await anonymous.submit(sample_task())
        assert caught.value.code == "UNAUTHENTICATED" and not caught.value.retryable
        async with GrpcBroker(server.target, token="s3cret") as trusted:
            await trusted.submit(sample_task())
            assert (await trusted.status("task-1")).state is TaskState.PENDING


def test_exposing_the_service_needs_a_token(tmp_path: Path) -> None:
    with pytest.raises(BuilderError, match="give it a token"):
        GrpcBrokerServer(tmp_path / "tasks.db", host="0.0.0.0")
    with pytest.raises(BuilderError, match="synchronous"):
        from daimon.distributed.brokers.grpc._store import SqliteTaskQueue

        SqliteTaskQueue(tmp_path / "x.db", synchronous="sometimes")


async def test_queues_survive_a_restart_of_the_service(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    first = GrpcBrokerServer(db, port=0)
    await first.start()
    async with GrpcBroker(first.target, max_deliver=1) as broker:
        for n in range(3):
            await broker.submit(sample_task(f"t{n}"))
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        assert await delivery.complete(sample_result(delivery.task.task_id))
        failing = await broker.claim(wait=2)
        assert failing is not None
        assert await failing.fail("boom", retry=True)  # the last attempt: dead-lettered
    await first.stop()
    async with GrpcBrokerServer(db, port=0) as second:
        async with GrpcBroker(second.target, max_deliver=1) as broker:
            done = await broker.status("t0")
            assert done.state is TaskState.COMPLETED and done.result == sample_result("t0")
            dead = await broker.status("t1")
            assert dead.state is TaskState.FAILED
            assert dead.error == "dead-lettered after 1 attempts; last error: boom"
            assert (await broker.status("t2")).state is TaskState.PENDING
            delivery = await broker.claim(wait=2)
            assert delivery is not None and delivery.task.task_id == "t2"
        assert second._queue is not None
        [dead] = second._queue.dead_letters("tasks")
        assert (dead.task.task_id, dead.attempts) == ("t1", 1)


async def test_a_claim_waits_on_the_service_for_a_submit(service: str, queue: str) -> None:
    async with GrpcBroker(service, queue=queue) as worker, GrpcBroker(service, queue=queue) as c:
        claiming = asyncio.create_task(worker.claim(wait=5))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await c.submit(sample_task())
        delivery = await claiming
        assert delivery is not None and delivery.task.task_id == "task-1"
        assert time.monotonic() - started < 1.0  # woken by the submit, not by polling


@pytest.mark.timeout(60)
async def test_cli_serves_the_broker(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "daimon.cli", "broker", "serve", "grpc"]
    proc = await asyncio.to_thread(
        start_service, [*argv, "--db", str(tmp_path / "t.db"), "--port", str(port)], port
    )
    try:
        async with GrpcBroker(f"127.0.0.1:{port}") as broker:
            await broker.submit(sample_task())
            assert (await broker.status("task-1")).state is TaskState.PENDING
    finally:
        stop_service(proc)


async def test_a_large_task_goes_through(service: str, queue: str) -> None:
    """Bodies up to 64 MiB pass (gRPC's own default would refuse anything over 4 MiB)."""
    async with GrpcBroker(service, queue=queue) as broker:
        await broker.submit(sample_task(input="x" * (6 * 1024 * 1024)))
        delivery = await broker.claim(wait=5)
        assert delivery is not None and len(delivery.task.input) == 6 * 1024 * 1024
        assert await delivery.complete(sample_result())


def test_cli_refuses_to_expose_the_service_without_a_token(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "daimon.cli", "broker", "serve", "grpc"]
    argv += ["--db", str(tmp_path / "t.db"), "--host", "0.0.0.0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "give it a token" in done.stderr
