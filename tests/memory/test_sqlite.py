from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from daimon.core import BuilderError, DaimonError, Message, SerializationError
from daimon.memory.sqlite import SQLiteMemory
from daimon.testing.memory import MemoryConformance, MemoryFactory, sample_messages


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
    def memory_code(self, tmp_path: Path) -> str:
        path = str(tmp_path / "memory.db")
        return f"from daimon.memory.sqlite import SQLiteMemory; memory = SQLiteMemory({path!r})"

    async def test_processes_append_to_one_session_without_loss(
        self, make_memory: MemoryFactory, request: pytest.FixtureRequest, tmp_path: Path
    ) -> None:
        """The conformance test, then the file passes SQLite's integrity check."""
        await super().test_processes_append_to_one_session_without_loss(
            make_memory, request, tmp_path
        )
        with sqlite3.connect(tmp_path / "memory.db") as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.close()


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


async def test_a_program_that_never_closes_the_memory_still_exits_and_keeps_its_writes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    program = (
        "import asyncio\n"
        "from daimon.core import Message\n"
        "from daimon.memory.sqlite import SQLiteMemory\n"
        f"memory = SQLiteMemory({str(path)!r})\n"
        "asyncio.run(memory.add_messages('s', [Message.user('kept')]))\n"
    )
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", program], capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    async with SQLiteMemory(path) as reopened:
        assert await reopened.get_messages("s") == [Message.user("kept")]


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


def test_a_missing_client_library_names_its_extra(
    import_without: Callable[[str, str], tuple[str, str, str]],
) -> None:
    extra, _, message = import_without("daimon.memory.sqlite", "aiosqlite")
    assert extra == "sqlite"
    assert 'pip install "daimon-agents[sqlite]"' in message
