"""``daimon broker dead-letters`` against a real Redis broker."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from daimon.distributed.brokers.redis import RedisBroker
from daimon.testing.brokers import sample_task

from .conftest import CLI

URL = "redis://127.0.0.1:6379/0"


async def _dead_letter_one(queue: str) -> None:
    async with RedisBroker.from_url(URL, queue=queue) as broker:
        await broker.submit(sample_task("poison"))
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        assert await delivery.fail("ValueError: nope")
        await broker.submit(sample_task("healthy"))


@pytest.mark.service("redis")
def test_dead_letters_are_listed_as_text_and_json_and_stay(cli: CLI) -> None:
    queue = f"cli-dead-{uuid.uuid4().hex[:8]}"
    asyncio.run(_dead_letter_one(queue))

    text = cli("broker", "dead-letters", URL, "--queue", queue)
    assert text.returncode == 0, text.stderr
    [line] = text.stdout.splitlines()
    assert "  poison  attempts=1  ValueError: nope" in line

    as_json = cli("broker", "dead-letters", URL, "--queue", queue, "--json", "--limit", "5")
    assert as_json.returncode == 0, as_json.stderr
    [row] = json.loads(as_json.stdout)
    assert row["task"]["task_id"] == "poison"
    assert row["task"]["input"] == sample_task().input
    assert (row["reason"], row["attempts"]) == ("ValueError: nope", 1)
    assert row["dead_at"] > 0


@pytest.mark.service("redis")
def test_an_empty_queue_and_a_bad_limit(cli: CLI) -> None:
    queue = f"cli-dead-{uuid.uuid4().hex[:8]}"
    empty = cli("broker", "dead-letters", URL, "--queue", queue)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == ""
    assert "no dead letters" in empty.stderr
    bad = cli("broker", "dead-letters", URL, "--queue", queue, "--limit", "0")
    assert bad.returncode == 2
    assert "limit must be a whole number from 1 to 10,000, got 0" in bad.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def grpc_service(tmp_path: Path) -> Iterator[str]:
    """daimon's gRPC broker service on a free port; its ``host:port``."""
    port = _free_port()
    argv = [sys.executable, "-m", "daimon.distributed.brokers.grpc", "--db", str(tmp_path / "t.db")]
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                break
        except OSError:
            assert proc.poll() is None, f"the broker service exited with {proc.returncode}"
            assert time.monotonic() < deadline, "the broker service did not start"
            time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def test_the_queue_named_by_the_url_is_listed_without_queue(cli: CLI, grpc_service: str) -> None:
    """Without ``--queue`` the URL's queue (or the broker's default) is read, not ``tasks``."""
    from daimon.distributed.brokers.grpc import GrpcBroker

    queue = f"cli-dead-{uuid.uuid4().hex[:8]}"

    async def dead_letter_one() -> None:
        async with GrpcBroker(grpc_service, queue=queue) as broker:
            await broker.submit(sample_task("poison"))
            delivery = await broker.claim(wait=2)
            assert delivery is not None
            assert await delivery.fail("ValueError: nope")

    asyncio.run(dead_letter_one())
    listed = cli("broker", "dead-letters", f"grpc://{grpc_service}?queue={queue}", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["task"]["task_id"] for row in json.loads(listed.stdout)] == ["poison"]
