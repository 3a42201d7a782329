from __future__ import annotations

import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import nats
import pytest

from daimon.checkpoint.nats import NatsKVCheckpoint, _key, _run_id
from daimon.core import BuilderError, CheckpointCorruptError, CheckpointState, SerializationError
from daimon.testing.checkpoint import CheckpointConformance, sample_state

pytestmark = pytest.mark.service("nats")


@pytest.fixture
def nats_url(service_url: dict[str, str]) -> str:
    return service_url["nats"]


@pytest.fixture
async def bucket(nats_url: str) -> AsyncIterator[str]:
    name = f"daimon_test_{uuid.uuid4().hex}"
    yield name
    nc = await nats.connect(nats_url)
    try:
        await nc.jetstream().delete_key_value(name)
    except Exception:  # never created
        pass
    finally:
        await nc.close()


class TestNatsKVCheckpoint(CheckpointConformance):
    @pytest.fixture
    async def make_checkpoint(self, nats_url: str, bucket: str) -> AsyncIterator[Any]:
        handles: list[NatsKVCheckpoint] = []

        async def make(**options: Any) -> NatsKVCheckpoint:
            handle = NatsKVCheckpoint.from_url(nats_url, bucket=bucket, **options)
            handles.append(handle)
            await handle.setup()  # others may be made meanwhile: return this one, not the last
            return handle

        yield make
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def store(nats_url: str, bucket: str) -> AsyncIterator[NatsKVCheckpoint]:
    async with NatsKVCheckpoint(nats_url, bucket=bucket) as checkpoint:
        yield checkpoint


@pytest.mark.parametrize(
    "run_id", ["plain-id_1", "a.b", "..", "a b", "é/ü", "=41", "%41", "~", "*", ">", "a" * 200]
)
def test_run_ids_become_valid_keys_and_back(run_id: str) -> None:
    key = _key(run_id)
    assert key.startswith("run.")
    assert all(c.isalnum() or c in "-_=" for c in key.removeprefix("run.")), key
    assert _run_id(key) == run_id


async def test_keep_last_above_the_jetstream_limit_is_refused() -> None:
    with pytest.raises(BuilderError, match="at most 64"):
        NatsKVCheckpoint("nats://127.0.0.1:4222", keep_last=65)


async def test_setup_creates_the_bucket_with_retention(nats_url: str, bucket: str) -> None:
    async with NatsKVCheckpoint(nats_url, bucket=bucket, keep_last=5, ttl=3600) as store:
        await store.save(CheckpointState(run_id="r"))
    nc = await nats.connect(nats_url)
    try:
        status = await (await nc.jetstream().key_value(bucket)).status()
        assert status.history == 5
        assert status.ttl == 3600
    finally:
        await nc.close()


async def test_damaged_newest_record_falls_back(store: NatsKVCheckpoint) -> None:
    await store.save(CheckpointState(run_id="r", iteration=1))
    previous = sample_state("r", 2)
    await store.save(previous)
    kv = await store._kv()
    data: bytes = (await kv.get("run.r")).value  # each damaged copy becomes the newest revision
    rng = random.Random(5)
    damaged = [data[: rng.randrange(len(data))] for _ in range(10)]
    for bit in rng.sample(range(len(data) * 8), 20):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        damaged.append(bytes(flipped))
    for bad in damaged:
        await kv.put("run.r", bad)
        assert await store.load("r") == previous
    await store.save(CheckpointState(run_id="r", iteration=3))  # the run goes on after a load
    assert await store.load("r") == CheckpointState(run_id="r", iteration=3)


async def test_only_damaged_records_raise_corrupt(store: NatsKVCheckpoint) -> None:
    kv = await store._kv()
    await kv.put("run.r", b'{"daimon_checkpoint":1,"seq":1,"sa')
    with pytest.raises(CheckpointCorruptError):
        await store.load("r")


async def test_code_reviving_payloads_raise_serialization_error(
    store: NatsKVCheckpoint, forge: Callable[[bytes, int, int], bytes], reviving_payload: bytes
) -> None:
    await store.save(CheckpointState(run_id="r"))
    kv = await store._kv()
    await kv.put("run.r", forge(reviving_payload, 2, int(time.time() * 1000)))
    with pytest.raises(SerializationError) as caught:
        await store.load("r")
    assert not isinstance(caught.value, CheckpointCorruptError)


async def test_a_client_passed_in_stays_open(nats_url: str, bucket: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        async with NatsKVCheckpoint(nc, bucket=bucket) as store:
            await store.save(CheckpointState(run_id="r"))
        assert nc.is_connected
    finally:
        await nc.close()
