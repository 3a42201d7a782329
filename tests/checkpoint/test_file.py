from __future__ import annotations

import json
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from daimon.checkpoint.file import FileCheckpoint
from daimon.core import (
    BuilderError,
    CheckpointConflictError,
    CheckpointCorruptError,
    CheckpointState,
    DaimonError,
    InvalidIdError,
    RunLeasedError,
    SerializationError,
)
from daimon.testing.checkpoint import CheckpointConformance, sample_state


class TestFileCheckpoint(CheckpointConformance):
    @pytest.fixture
    async def make_checkpoint(self, tmp_path: Path) -> Callable[..., Any]:
        async def make(**options: Any) -> FileCheckpoint:
            return FileCheckpoint(tmp_path / "runs", **options)

        return make


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FileCheckpoint]:
    async with FileCheckpoint(tmp_path / "runs") as checkpoint:
        yield checkpoint


def record_path(store: FileCheckpoint, run_id: str, seq: int) -> Path:
    return store.directory / run_id / f"{seq:08d}.json"


def overwrite(path: Path, data: bytes) -> None:
    # A new file rather than a truncated one: ext4 flushes a truncated file on close (slow).
    path.unlink(missing_ok=True)
    path.write_bytes(data)


async def test_layout_is_one_json_file_per_checkpoint(store: FileCheckpoint) -> None:
    await store.save(sample_state("r", 1))
    await store.save(sample_state("r", 2))
    assert sorted(os.listdir(store.directory / "r")) == ["00000001.json", "00000002.json"]
    record = json.loads(record_path(store, "r", 2).read_bytes())
    assert record["seq"] == 2
    assert record["state"]["daimon"] == 1
    assert record["state"]["data"]["iteration"] == 2


@pytest.mark.parametrize(
    "run_id",
    ["", ".", "..", "../x", "x/..", "a/b", "/abs", "a\\b", "x\0y", ".hidden", "\ud800", "a" * 300],
)
async def test_run_ids_that_could_escape_are_refused(store: FileCheckpoint, run_id: str) -> None:
    with pytest.raises(InvalidIdError, match="invalid run id"):
        await store.save(CheckpointState(run_id=run_id))
    for call in (store.load, store.history, store.delete):
        with pytest.raises(InvalidIdError):
            await call(run_id)
    with pytest.raises(InvalidIdError):
        await store.fork("r", run_id)
    assert list(store.directory.parent.iterdir()) == [store.directory]
    assert list(store.directory.iterdir()) == []


async def _two_checkpoints(store: FileCheckpoint) -> tuple[CheckpointState, bytes]:
    """A small committed state, then a rich one whose record the test damages."""
    previous = CheckpointState(run_id="r", iteration=1, custom={"step": "before"})
    await store.save(previous)
    await store.save(sample_state("r", 2))
    return previous, record_path(store, "r", 2).read_bytes()


async def test_truncation_at_every_offset_falls_back_to_the_previous_state(
    store: FileCheckpoint,
) -> None:
    previous, data = await _two_checkpoints(store)
    path = record_path(store, "r", 2)
    for offset in range(len(data)):
        overwrite(path, data[:offset])
        assert await store.load("r") == previous, f"truncated at {offset}"
    overwrite(path, data)
    assert await store.load("r") == sample_state("r", 2)


async def test_truncation_of_the_only_record_raises_corrupt(store: FileCheckpoint) -> None:
    await store.save(sample_state("r", 1))
    path = record_path(store, "r", 1)
    data = path.read_bytes()
    for offset in range(len(data)):
        overwrite(path, data[:offset])
        with pytest.raises(CheckpointCorruptError):
            await store.load("r")
    assert await store.history("r") == []


async def test_every_sampled_bit_flip_is_detected(store: FileCheckpoint) -> None:
    previous, data = await _two_checkpoints(store)
    path = record_path(store, "r", 2)
    positions = random.Random(7).sample(range(len(data) * 8), 1000)
    for bit in positions:
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        overwrite(path, bytes(flipped))
        assert await store.load("r") == previous, f"bit {bit} flipped"
        assert await store.history("r") == [previous], f"bit {bit} flipped"


async def test_a_bit_flip_in_the_only_record_raises_corrupt(store: FileCheckpoint) -> None:
    await store.save(sample_state("r", 1))
    path = record_path(store, "r", 1)
    data = path.read_bytes()
    for bit in random.Random(11).sample(range(len(data) * 8), 200):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        overwrite(path, bytes(flipped))
        with pytest.raises(CheckpointCorruptError):
            await store.load("r")


async def test_a_record_moved_to_another_run_is_not_returned(store: FileCheckpoint) -> None:
    await store.save(sample_state("a", 1))
    (store.directory / "b").mkdir()
    os.link(record_path(store, "a", 1), record_path(store, "b", 1))
    with pytest.raises(CheckpointCorruptError, match="belongs to run 'a'"):
        await store.load("b")


async def test_a_record_renamed_to_another_number_is_not_returned(store: FileCheckpoint) -> None:
    previous, data = await _two_checkpoints(store)
    record_path(store, "r", 3).write_bytes(data)  # holds number 2: refused, 2 is returned
    assert await store.load("r") == sample_state("r", 2)
    record_path(store, "r", 2).unlink()
    assert await store.load("r") == previous


async def test_code_reviving_payloads_raise_serialization_error(
    store: FileCheckpoint, forge: Callable[[bytes, int, int], bytes], reviving_payload: bytes
) -> None:
    await store.save(CheckpointState(run_id="r"))
    record_path(store, "r", 2).write_bytes(forge(reviving_payload, 2, int(time.time() * 1000)))
    with pytest.raises(SerializationError) as caught:
        await store.load("r")
    assert not isinstance(caught.value, CheckpointCorruptError)  # intact, but refused


@pytest.mark.parametrize("step", ["write", "fsync", "link", "fsync-folder"])
async def test_a_crash_at_any_step_of_save_leaves_a_committed_state(
    store: FileCheckpoint, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    await store.save(sample_state("r", 1))
    real = {"write": os.write, "fsync": os.fsync, "link": os.link}
    calls = {"fsync": 0}

    def crash(*args: Any) -> Any:
        raise OSError(5, f"injected crash at {step}")

    def fsync(fd: int) -> None:
        calls["fsync"] += 1
        if step == "fsync-folder" and calls["fsync"] == 2:  # the record first, then its folder
            crash()
        real["fsync"](fd)

    target = {"write": "write", "fsync": "fsync", "link": "link"}.get(step)
    if target is not None:
        monkeypatch.setattr(os, target, crash)
    else:
        monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="injected crash"):
        await store.save(sample_state("r", 2))
    monkeypatch.undo()

    reopened = FileCheckpoint(store.directory)
    committed = {1: sample_state("r", 1), 2: sample_state("r", 2)}
    loaded = await reopened.load("r")
    assert loaded in committed.values()
    assert not [p for p in (store.directory / "r").iterdir() if p.name.endswith(".tmp")]
    await reopened.save(sample_state("r", 3))
    assert await reopened.load("r") == sample_state("r", 3)


async def test_prune_removes_expired_checkpoints_and_crash_leftovers(tmp_path: Path) -> None:
    store = FileCheckpoint(tmp_path / "runs")
    for iteration in range(3):
        await store.save(sample_state("old", iteration))
    await store.save(sample_state("new", 1))
    leftover = tmp_path / "runs" / "new" / ".00000002.json.0123.tmp"
    leftover.write_bytes(b'{"daimon_checkpoint":1,"se')
    stale_folder = tmp_path / "runs" / ".deleted-0123"
    stale_folder.mkdir()
    long_ago = time.time() - 7200
    for path in [*(tmp_path / "runs" / "old").iterdir(), leftover, stale_folder]:
        os.utime(path, (long_ago, long_ago))

    assert await store.load("new") == sample_state("new", 1)  # the leftover is ignored
    assert await FileCheckpoint(tmp_path / "runs", keep_last=2).prune() == 1  # old: 3 -> 2
    assert await FileCheckpoint(tmp_path / "runs", ttl=3600).prune() == 2
    assert await store.list_runs() == ["new"]
    assert sorted(os.listdir(tmp_path / "runs")) == ["new"]
    assert os.listdir(tmp_path / "runs" / "new") == ["00000001.json"]


async def test_fork_into_an_existing_run_changes_nothing(store: FileCheckpoint) -> None:
    await store.save(sample_state("a", 1))
    await store.save(sample_state("b", 1))
    with pytest.raises(DaimonError, match="already has checkpoints"):
        await store.fork("a", "b")
    assert await store.history("b") == [sample_state("b", 1)]
    assert sorted(os.listdir(store.directory)) == ["a", "b"]


async def test_blocking_io_runs_off_the_event_loop(
    store: FileCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    loop_thread = threading.get_ident()
    seen: list[int] = []
    real_listdir = os.listdir

    def listdir(path: Any) -> list[str]:
        seen.append(threading.get_ident())
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    await store.save(sample_state("r", 1))
    await store.load("r")
    assert seen
    assert loop_thread not in seen


async def test_retention_options_are_checked() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(BuilderError, match="keep_last"):
            FileCheckpoint("x", keep_last=bad)  # type: ignore[arg-type]
    for bad_ttl in (0, -1.0, float("nan"), float("inf"), "10"):
        with pytest.raises(BuilderError, match="ttl"):
            FileCheckpoint("x", ttl=bad_ttl)  # type: ignore[arg-type]


async def test_a_holder_whose_lease_was_taken_over_cannot_save(tmp_path: Path) -> None:
    """Fencing by the next generation's file: a holder whose own clock says its lease lives is
    still refused once another process took the lease over (clocks that disagree)."""
    holder, taker = FileCheckpoint(tmp_path), FileCheckpoint(tmp_path)
    lease = await holder.acquire("r")
    await holder.save(CheckpointState(run_id="r", iteration=1))
    lease_file = tmp_path / "r" / ".lease-00000001"
    record = json.loads(lease_file.read_bytes())
    lease_file.write_text(json.dumps({**record, "expires_at": 1}))  # the taker's clock: expired
    taken = await taker.acquire("r")
    assert taken.token == lease.token + 1
    with pytest.raises(CheckpointConflictError, match="was taken over"):
        await holder.save(CheckpointState(run_id="r", iteration=2))
    with pytest.raises(CheckpointConflictError):
        await holder.renew(lease)
    await holder.release(lease)  # leaves the taker's lease alone
    assert sorted(os.listdir(tmp_path / "r")) == [".lease-00000002", "00000001.json"]


async def test_a_torn_lease_file_counts_as_ended(tmp_path: Path) -> None:
    """A lease file cut short (its writer's machine crashed) is taken over, not obeyed."""
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / ".lease-00000004").write_bytes(b'{"daimon_lease":1,"own')
    lease = await FileCheckpoint(tmp_path).acquire("r")
    assert lease.token == 5
    with pytest.raises(RunLeasedError):
        await FileCheckpoint(tmp_path).acquire("r")
