from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from daimon.core import BuilderError, Message, SerializationError
from daimon.memory.redis import RedisMemory
from daimon.testing.memory import MemoryConformance

pytestmark = pytest.mark.service("redis")


class TestRedisMemory(MemoryConformance):
    @pytest.fixture
    async def make_memory(self, redis_url: str, redis_prefix: str) -> AsyncIterator[Any]:
        handles: list[RedisMemory] = []

        async def make() -> RedisMemory:
            handles.append(RedisMemory.from_url(redis_url, prefix=redis_prefix))
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()

    @pytest.fixture
    def memory_code(self, redis_url: str, redis_prefix: str) -> str:
        return (
            "from daimon.memory.redis import RedisMemory; "
            f"memory = RedisMemory({redis_url!r}, prefix={redis_prefix!r})"
        )


@pytest.fixture
async def memory(redis_url: str, redis_prefix: str) -> AsyncIterator[RedisMemory]:
    async with RedisMemory(redis_url, prefix=redis_prefix) as handle:
        yield handle


async def test_list_sessions_scans_only_this_prefix(redis_url: str, redis_prefix: str) -> None:
    async with (
        RedisMemory(redis_url, prefix=redis_prefix + "a*[") as first,
        RedisMemory(redis_url, prefix=redis_prefix + "ab") as second,
    ):
        await first.add_messages("s1", [Message.user("x")])
        await first.add_messages("s2", [Message.user("x")])
        await second.add_messages("s3", [Message.user("x")])
        assert await first.list_sessions() == ["s1", "s2"]
        assert await second.list_sessions() == ["s3"]


async def test_ttl_is_set_and_refreshed_on_every_write(redis_url: str, redis_prefix: str) -> None:
    async with RedisMemory(redis_url, prefix=redis_prefix, ttl=0.6) as memory:
        await memory.add_messages("s", [Message.user("1")])
        await asyncio.sleep(0.4)
        await memory.add_messages("s", [Message.user("2")])  # refreshes the TTL
        await asyncio.sleep(0.4)
        assert len(await memory.get_messages("s")) == 2
        await asyncio.sleep(0.5)
        assert await memory.get_messages("s") == []  # expired 0.6 s after the last write
        assert await memory.list_sessions() == []


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


@pytest.mark.parametrize("client", ["url", "bare-client"])
async def test_a_killed_connection_loses_no_acknowledged_write(
    redis_url: str,
    redis_prefix: str,
    client: str,
    kill_redis_mid_command: Callable[[str, Awaitable[object]], Awaitable[object]],
) -> None:
    """Kill this memory's connection in the middle of every fifth append, from another client.

    Built from a URL, the memory reconnects and retries: every append succeeds. Given a client
    without a retry policy, each of those appends raises redis' ``ConnectionError``; either way
    every acknowledged append is kept, once.
    """
    name = f"daimon-test-{uuid.uuid4().hex[:12]}"
    url = f"{redis_url}?client_name={name}"
    memory = RedisMemory(
        url if client == "url" else aioredis.Redis.from_url(url), prefix=redis_prefix
    )
    acknowledged: list[str] = []
    failures: list[Exception] = []
    try:
        for n in range(60):
            append = memory.add_messages("s", [Message.user(f"{n}a"), Message.user(f"{n}b")])
            try:
                await (kill_redis_mid_command(name, append) if n % 5 == 0 else append)
            except redis.exceptions.ConnectionError as exc:
                failures.append(exc)
            else:
                acknowledged += [f"{n}a", f"{n}b"]
        assert [m.text for m in await memory.get_messages("s")] == acknowledged
        assert len(failures) == (0 if client == "url" else 12)
    finally:
        await memory.aclose()
        await memory._client.aclose()


def test_a_missing_client_library_names_its_extra(
    import_without: Callable[[str, str], tuple[str, str, str]],
) -> None:
    extra, _, message = import_without("daimon.memory.redis", "redis")
    assert extra == "redis"
    assert 'pip install "daimon-agents[redis]"' in message
