from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from daimon.core import BuilderError, DaimonError, Message, SerializationError
from daimon.memory.sqlite import SQLiteMemory
from daimon.testing.memory import MemoryConformance, sample_messages


class TestSQLiteMemory(MemoryConformance):
    @pytest.fixture
    async def make_memory(self, tmp_path: Path) -> AsyncIterator[Any]:
        handles: list[SQLiteMemory] = []

        async def make() -> SQLiteMemory:
            handles.append(SQLiteMemory(tmp_path / "memory.db"))
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[SQLiteMemory]:
    async with SQLiteMemory(tmp_path / "memory.db") as handle:
        yield handle


async def test_history_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLiteMemory(path) as memory:
        await memory.add_messages("s", sample_messages())
        await memory.add_messages("t", [Message.user("x")])
    async with SQLiteMemory(path) as reopened:
        assert await reopened.get_messages("s") == sample_messages()
        assert await reopened.list_sessions() == ["s", "t"]


async def test_file_is_in_wal_mode_with_the_documented_table(memory: SQLiteMemory) -> None:
    await memory.add_messages("s", [Message.user("hi")])
    with sqlite3.connect(memory.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(messages)")]
        assert columns == ["session_id", "seq", "payload"]
        [(payload,)] = conn.execute("SELECT payload FROM messages").fetchall()
        assert payload.startswith('{"daimon": 1, "data": {')
    conn.close()


async def test_schema_is_created_lazily_on_first_use(tmp_path: Path) -> None:
    memory = SQLiteMemory(tmp_path / "lazy.db")
    try:
        assert await memory.get_messages("s") == []
        assert await memory.list_sessions() == []
    finally:
        await memory.aclose()


async def test_aclose_is_idempotent_and_final(tmp_path: Path) -> None:
    memory = SQLiteMemory(tmp_path / "memory.db")
    await memory.add_messages("s", [Message.user("hi")])
    await memory.aclose()
    await memory.aclose()
    with pytest.raises(DaimonError, match="closed"):
        await memory.get_messages("s")


@pytest.mark.parametrize(
    "payload",
    [
        '{"daimon":1,"data":{"role":"user","content":"x","__class__":"os.system"}}',
        '{"daimon":1,"data":{"role":"user","content":[{"kind":"text","text":"x","py/object":1}]}}',
        '{"daimon":1,"data":{"kind":"tool_call","id":"x","name":"rm"}}',
        '{"lc":1,"type":"constructor","id":["os","system"],"kwargs":{}}',
        "\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94.",
        '{"daimon":2,"data":{"role":"user","content":"x"}}',
    ],
    ids=["__class__", "py/object", "type-tag", "langchain", "pickle", "newer-version"],
)
async def test_planted_code_reviving_payloads_raise_serialization_error(
    memory: SQLiteMemory, payload: str
) -> None:
    await memory.add_messages("s", [Message.user("fine")])
    with sqlite3.connect(memory.path) as conn:
        conn.execute("INSERT INTO messages VALUES ('s', 2, ?)", (payload,))
    conn.close()
    with pytest.raises(SerializationError, match=r"session 's', message 2"):
        await memory.get_messages("s")


async def test_busy_timeout_is_checked() -> None:
    for bad in (0, -1, float("nan"), float("inf"), True, "5"):
        with pytest.raises(BuilderError, match="busy_timeout"):
            SQLiteMemory("x.db", busy_timeout=bad)  # type: ignore[arg-type]


async def test_a_writer_holding_the_lock_delays_but_does_not_fail(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLiteMemory(path, busy_timeout=0.05) as memory:
        await memory.setup()
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        loop = asyncio.get_running_loop()
        loop.call_later(0.4, blocker.execute, "COMMIT")
        started = time.monotonic()
        await memory.add_messages("s", [Message.user("waited")])
        assert time.monotonic() - started >= 0.3
        blocker.close()
        assert await memory.get_messages("s") == [Message.user("waited")]


WORKER = """
import asyncio, sys, time
from pathlib import Path
from daimon.core import Message
from daimon.memory.sqlite import SQLiteMemory

path, worker, count, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])

async def main():
    async with SQLiteMemory(path) as memory:
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
async def test_eight_processes_append_to_one_session_without_loss(tmp_path: Path) -> None:
    """8 processes x 1,000 appends, started together: 8,000 messages, none lost, no lock error."""
    workers, count = 8, 1000
    path = tmp_path / "shared.db"
    async with SQLiteMemory(path) as memory:
        await memory.setup()
    errors = await asyncio.to_thread(run_workers, [str(path)], workers, count, tmp_path)
    assert errors == [""] * workers  # no "database is locked", no warning

    async with SQLiteMemory(path) as memory:
        texts = [m.text for m in await memory.get_messages("shared")]
    assert len(texts) == workers * count
    for w in range(workers):  # each process's appends, in its order
        assert [t for t in texts if t.startswith(f"{w}:")] == [f"{w}:{i}" for i in range(count)]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


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
        [sys.executable, "-c", BLOCKED_IMPORT, "daimon.memory.sqlite", "aiosqlite"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("sqlite |"), out
    assert 'pip install "daimon[sqlite]"' in out.stdout
