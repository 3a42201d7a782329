from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from daimon.checkpoint.redis import RedisCheckpoint
from daimon.core import (
    CheckpointConflictError,
    CheckpointCorruptError,
    CheckpointState,
    SerializationError,
)
from daimon.testing.checkpoint import CheckpointConformance, sample_state

pytestmark = pytest.mark.service("redis")


class TestRedisCheckpoint(CheckpointConformance):
    @pytest.fixture
    async def make_checkpoint(self, redis_url: str, redis_prefix: str) -> AsyncIterator[Any]:
        handles: list[RedisCheckpoint] = []

        async def make(**options: Any) -> RedisCheckpoint:
            handles.append(RedisCheckpoint.from_url(redis_url, prefix=redis_prefix, **options))
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def store(redis_url: str, redis_prefix: str) -> AsyncIterator[RedisCheckpoint]:
    async with RedisCheckpoint.from_url(redis_url, prefix=redis_prefix) as checkpoint:
        yield checkpoint


async def test_keys_live_under_the_prefix_and_expire_with_ttl(
    redis_url: str, redis_prefix: str
) -> None:
    async with RedisCheckpoint(redis_url, prefix=redis_prefix, ttl=30) as store:
        await store.save(sample_state("r", 1))
        client = aioredis.Redis.from_url(redis_url)
        try:
            keys = sorted([key async for key in client.scan_iter(match=f"{redis_prefix}*")])
            assert keys == [f"{redis_prefix}run:r".encode(), f"{redis_prefix}runs".encode()]
            assert 0 < await client.pttl(f"{redis_prefix}run:r") <= 30_000
        finally:
            await client.aclose()


async def test_damaged_newest_record_falls_back(store: RedisCheckpoint) -> None:
    previous = CheckpointState(run_id="r", iteration=1)
    await store.save(previous)
    await store.save(sample_state("r", 2))
    client = store._client
    key = f"{store.prefix}run:r"
    data: bytes = await client.hget(key, "2")
    rng = random.Random(3)
    damaged = [data[: rng.randrange(len(data))] for _ in range(50)]
    for bit in rng.sample(range(len(data) * 8), 150):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        damaged.append(bytes(flipped))
    for bad in damaged:
        await client.hset(key, "2", bad)
        assert await store.load("r") == previous
    await client.hdel(key, "1")
    with pytest.raises(CheckpointCorruptError):
        await store.load("r")


async def test_code_reviving_payloads_raise_serialization_error(
    store: RedisCheckpoint, forge: Callable[[bytes, int, int], bytes], reviving_payload: bytes
) -> None:
    await store.save(CheckpointState(run_id="r"))
    key = f"{store.prefix}run:r"
    record = forge(reviving_payload, 2, int(time.time() * 1000))
    await store._client.hset(key, mapping={"2": record, "head": "2"})
    with pytest.raises(SerializationError) as caught:
        await store.load("r")
    assert not isinstance(caught.value, CheckpointCorruptError)


@pytest.mark.parametrize("client", ["url", "bare-client"])
async def test_a_killed_connection_loses_no_acknowledged_save(
    redis_url: str,
    redis_prefix: str,
    client: str,
    kill_redis_mid_command: Callable[[str, Awaitable[object]], Awaitable[object]],
) -> None:
    """Kill this handle's connection in the middle of every fifth save, from another client.

    Built from a URL, the handle reconnects and retries: every save succeeds. Given a client
    without a retry policy, each of those saves raises redis' ``ConnectionError``; either way
    every acknowledged save is kept.
    """
    name = f"daimon-test-{uuid.uuid4().hex[:12]}"
    url = f"{redis_url}?client_name={name}"
    store = RedisCheckpoint(
        url if client == "url" else aioredis.Redis.from_url(url), prefix=redis_prefix
    )
    acknowledged: list[int] = []
    failures: list[Exception] = []
    try:
        for iteration in range(60):
            save = store.save(CheckpointState(run_id="r", iteration=iteration))
            try:
                await (kill_redis_mid_command(name, save) if iteration % 5 == 0 else save)
            except redis.exceptions.ConnectionError as exc:
                failures.append(exc)
                await store.load("r")
            else:
                acknowledged.append(iteration)
        history = [s.iteration for s in await store.history("r")]
        assert [i for i in history if i in acknowledged] == acknowledged
        assert len(history) == len(acknowledged)
        assert len(failures) == (0 if client == "url" else 12)
    finally:
        await store.aclose()
        await store._client.aclose()


async def test_a_save_replayed_after_a_lost_reply_is_not_a_conflict(store: RedisCheckpoint) -> None:
    """redis-py retries a command whose reply was lost; the script must accept its own write."""
    from daimon.kit import checkpoint_records as _base

    record = _base.encode(CheckpointState(run_id="r", iteration=1), 1, 1_700_000_000_000)
    keys = [f"{store.prefix}run:r", f"{store.prefix}runs", f"{store.prefix}lease:r"]
    args = [0, record, 1_700_000_000_000, 0, 0, "r", "save-1", ""]
    assert await store._save_script(keys=keys, args=args) == 0
    assert await store._save_script(keys=keys, args=args) == 0  # the replay
    other = _base.encode(CheckpointState(run_id="r", iteration=2), 1, 1_700_000_000_001)
    rival = [0, other, 1, 0, 0, "r", "save-2", ""]
    assert await store._save_script(keys=keys, args=rival) == 1  # a rival
    # A rival whose record is byte-equal (two resumers claiming one run in one millisecond) is
    # still a rival: it used to pass as the first save's replay, and both ran the pending tool.
    twin = [0, record, 1_700_000_000_000, 0, 0, "r", "save-3", ""]
    assert await store._save_script(keys=keys, args=twin) == 1
    assert [s.iteration for s in await store.history("r")] == [1]


async def test_two_handles_saving_equal_records_at_once_conflict(redis_url: str) -> None:
    """Two handles that saw one checkpoint each save the same state: exactly one wins."""
    prefix = f"daimon-test:{uuid.uuid4().hex}:"
    first, second = (RedisCheckpoint(redis_url, prefix=prefix) for _ in range(2))
    try:
        await first.save(CheckpointState(run_id="twin", iteration=1))
        assert await second.load("twin") is not None
        claim = CheckpointState(run_id="twin", iteration=1)
        outcomes = await asyncio.gather(
            first.save(claim), second.save(claim), return_exceptions=True
        )
        assert sorted(type(o).__name__ for o in outcomes) == [
            "CheckpointConflictError",
            "NoneType",
        ], outcomes
    finally:
        await first.delete("twin")
        await first.aclose()
        await second.aclose()


async def test_the_server_clock_rules_a_holder_whose_lease_it_expired_cannot_save(
    redis_url: str, redis_prefix: str
) -> None:
    """Fencing in the save script: a holder whose own clock says its lease lives is still refused
    once the server expired the lease and another holder took it."""
    holder = RedisCheckpoint.from_url(redis_url, prefix=redis_prefix)
    taker = RedisCheckpoint.from_url(redis_url, prefix=redis_prefix)
    try:
        lease = await holder.acquire("r")
        await holder.save(CheckpointState(run_id="r", iteration=1))
        await holder._client.pexpire(f"{redis_prefix}lease:r", 1)  # the server's clock ran ahead
        await asyncio.sleep(0.05)
        taken = await taker.acquire("r")
        assert taken.token > lease.token
        with pytest.raises(CheckpointConflictError, match="expired or was taken over"):
            await holder.save(CheckpointState(run_id="r", iteration=2))
        with pytest.raises(CheckpointConflictError):
            await holder.renew(lease)
        assert [s.iteration for s in await taker.history("r")] == [1]
    finally:
        await holder.aclose()
        await taker.aclose()
