from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from daimon.core import BuilderError, Message, SerializationError
from daimon.memory.redis import RedisMemory
from daimon.testing.memory import MemoryConformance, sample_messages

pytestmark = pytest.mark.service("redis")


@pytest.fixture
def redis_url(service_url: dict[str, str]) -> str:
    return service_url["redis"]


@pytest.fixture
async def prefix(redis_url: str) -> AsyncIterator[str]:
    name = f"daimon-test:{uuid.uuid4().hex}:"
    yield name
    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


class TestRedisMemory(MemoryConformance):
    @pytest.fixture
    async def make_memory(self, redis_url: str, prefix: str) -> AsyncIterator[Any]:
        handles: list[RedisMemory] = []

        async def make() -> RedisMemory:
            handles.append(RedisMemory.from_url(redis_url, prefix=prefix))
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def memory(redis_url: str, prefix: str) -> AsyncIterator[RedisMemory]:
    async with RedisMemory(redis_url, prefix=prefix) as handle:
        yield handle


async def test_list_sessions_scans_only_this_prefix(redis_url: str, prefix: str) -> None:
    async with (
        RedisMemory(redis_url, prefix=prefix + "a*[") as first,
        RedisMemory(redis_url, prefix=prefix + "ab") as second,
    ):
        await first.add_messages("s1", [Message.user("x")])
        await first.add_messages("s2", [Message.user("x")])
        await second.add_messages("s3", [Message.user("x")])
        assert await first.list_sessions() == ["s1", "s2"]
        assert await second.list_sessions() == ["s3"]


async def test_ttl_is_set_and_refreshed_on_every_write(redis_url: str, prefix: str) -> None:
    async with RedisMemory(redis_url, prefix=prefix, ttl=0.6) as memory:
        await memory.add_messages("s", [Message.user("1")])
        await asyncio.sleep(0.4)
        await memory.add_messages("s", [Message.user("2")])  # refreshes the TTL
        await asyncio.sleep(0.4)
        assert len(await memory.get_messages("s")) == 2
        await asyncio.sleep(0.5)
        assert await memory.get_messages("s") == []  # expired 0.6 s after the last write


async def test_ttl_is_checked() -> None:
    for bad in (0, -1, float("nan"), True, "5"):
        with pytest.raises(BuilderError, match="ttl"):
            RedisMemory("redis://127.0.0.1:6379", ttl=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "payload",
    [
        b'{"daimon":1,"data":{"role":"user","content":"x","__class__":"os.system"}}',
        b'{"daimon":1,"data":{"role":"user","content":[{"kind":"text","text":"x","py/object":1}]}}',
        b'{"daimon":1,"data":{"kind":"tool_call","id":"x","name":"rm"}}',
        b'{"lc":1,"type":"constructor","id":["os","system"],"kwargs":{}}',
        b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94.",
        b'{"daimon":2,"data":{"role":"user","content":"x"}}',
    ],
    ids=["__class__", "py/object", "type-tag", "langchain", "pickle", "newer-version"],
)
async def test_planted_code_reviving_payloads_raise_serialization_error(
    memory: RedisMemory, payload: bytes
) -> None:
    await memory.add_messages("s", [Message.user("fine")])
    await memory._client.rpush(f"{memory.prefix}s", payload)
    with pytest.raises(SerializationError, match=r"session 's', message 1"):
        await memory.get_messages("s")


async def _kill(redis_url: str, name: str) -> int:
    """Kill every connection named ``name`` from another client (not the whole server)."""
    killer = aioredis.Redis.from_url(redis_url)
    try:
        ids = [c["id"] for c in await killer.client_list() if c.get("name") == name]
        for client_id in ids:
            await killer.client_kill_filter(_id=client_id)
        return len(ids)
    finally:
        await killer.aclose()


@pytest.mark.parametrize("client", ["url", "bare-client"])
async def test_a_killed_connection_loses_no_acknowledged_write(
    redis_url: str, prefix: str, client: str
) -> None:
    """Kill this memory's connection every 5 appends, from another client.

    Built from a URL, the memory reconnects and retries: every append succeeds. Given a client
    without a retry policy, an append right after a kill raises redis' ``ConnectionError``;
    either way every acknowledged append is kept, once.
    """
    name = f"daimon-test-{uuid.uuid4().hex[:12]}"
    url = f"{redis_url}?client_name={name}"
    memory = RedisMemory(url if client == "url" else aioredis.Redis.from_url(url), prefix=prefix)
    acknowledged: list[str] = []
    failures: list[Exception] = []
    killed = 0
    try:
        for n in range(60):
            if n % 5 == 0:
                killed += await _kill(redis_url, name)
            try:
                await memory.add_messages("s", [Message.user(f"{n}a"), Message.user(f"{n}b")])
            except redis.exceptions.ConnectionError as exc:
                failures.append(exc)
            else:
                acknowledged += [f"{n}a", f"{n}b"]
        assert killed >= 11
        assert [m.text for m in await memory.get_messages("s")] == acknowledged
        assert failures == [] if client == "url" else len(failures) >= 10
    finally:
        await memory.aclose()
        await memory._client.aclose()


WORKER = """
import asyncio, sys
from pathlib import Path
from daimon.core import Message
from daimon.memory.redis import RedisMemory

url, prefix, worker, count, folder = sys.argv[1:4] + [int(sys.argv[4]), Path(sys.argv[5])]

async def main():
    async with RedisMemory(url, prefix=prefix) as memory:
        (folder / f"ready-{worker}").touch()
        while not (folder / "go").exists():
            await asyncio.sleep(0.002)
        for i in range(count):
            await memory.add_messages("shared", [Message.user(f"{worker}:{i}")])

asyncio.run(main())
"""


def run_workers(args: list[str], workers: int, count: int, folder: Path) -> list[str]:
    """Start the workers, release them together once all are ready; their stderr, if they fail."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, *args, str(w), str(count), str(folder)],
            stderr=subprocess.PIPE,
        )
        for w in range(workers)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(list(folder.glob("ready-*"))) < workers:
            assert all(p.poll() is None for p in processes), "a worker died while starting"
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.02)
        (folder / "go").touch()
        errors = [p.communicate(timeout=100)[1].decode() for p in processes]
    finally:
        for p in processes:
            p.kill()
    assert [p.returncode for p in processes] == [0] * workers, errors
    return errors


@pytest.mark.timeout(120)
async def test_eight_processes_append_to_one_session_without_loss(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """8 processes x 1,000 appends, started together: 8,000 messages, none lost."""
    workers, count = 8, 1000
    errors = await asyncio.to_thread(run_workers, [redis_url, prefix], workers, count, tmp_path)
    assert errors == [""] * workers  # nothing reached stderr

    async with RedisMemory(redis_url, prefix=prefix) as memory:
        texts = [m.text for m in await memory.get_messages("shared")]
    assert len(texts) == workers * count
    for w in range(workers):
        assert [t for t in texts if t.startswith(f"{w}:")] == [f"{w}:{i}" for i in range(count)]


async def test_sample_messages_survive_a_new_connection(redis_url: str, prefix: str) -> None:
    async with RedisMemory(redis_url, prefix=prefix) as memory:
        await memory.add_messages("s", sample_messages())
    async with RedisMemory(redis_url, prefix=prefix) as reopened:
        assert await reopened.get_messages("s") == sample_messages()


BLOCKED_IMPORT = """
import importlib, importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == sys.argv[2]:
            raise ImportError(f"blocked {name}")
        return None

sys.meta_path.insert(0, Block())
from daimon.core import MissingDependencyError
try:
    importlib.import_module(sys.argv[1])
except MissingDependencyError as exc:
    print(exc.extra, "|", exc)
"""


def test_a_missing_client_library_names_its_extra() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORT, "daimon.memory.redis", "redis"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("redis |"), out
    assert 'pip install "daimon[redis]"' in out.stdout
