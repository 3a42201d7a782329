"""A conformance suite for :class:`daimon.core.Memory` backends.

Subclass :class:`MemoryConformance` in a test module and provide a ``make_memory`` fixture: an
async callable that opens a new handle on one store, fresh for each test, and closes its handles
at teardown::

    class TestSQLiteMemory(MemoryConformance):
        @pytest.fixture
        async def make_memory(self, tmp_path):
            handles = []

            async def make():
                handles.append(SQLiteMemory(tmp_path / "memory.db"))
                return handles[-1]

            yield make
            for handle in handles:
                await handle.aclose()

        @pytest.fixture
        def memory_code(self, tmp_path):
            path = str(tmp_path / "memory.db")
            return f"from daimon.memory.sqlite import SQLiteMemory; memory = SQLiteMemory({path!r})"

``memory_code`` (needed when :attr:`~MemoryConformance.persistent`) is Python source that binds
``memory`` to a new handle on the same store; worker processes run it to append concurrently.

Every test then runs against the backend, for real.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import ClassVar

import pytest

from daimon.core.errors import InvalidIdError, SerializationError
from daimon.core.messages import ImagePart, Message, Role, TextPart, ToolCall
from daimon.core.protocols import Memory

__all__ = ("MemoryConformance", "MemoryFactory", "sample_messages")

MemoryFactory = Callable[[], Awaitable[Memory]]
"""Opens a new handle on the store under test."""


def sample_messages() -> list[Message]:
    """A conversation using every kind of content a message can hold."""
    return [
        Message.system("You are terse. Ünïcödé, emoji 🧪, quotes \" ' and a NUL \x00 byte."),
        Message.user(
            [
                TextPart(text="What is in these pictures?"),
                ImagePart(url="https://example.com/cat.png"),
                ImagePart(data=b"\x89PNG\r\n\x1a\n\x00\xff", media_type="image/png"),
            ]
        ),
        Message.assistant(
            "Let me look.",
            tool_calls=[
                ToolCall(
                    id="call_1", name="describe", arguments={"n": 2, "deep": {"a": [1, None]}}
                ),
                ToolCall(id="call_2", name="broken", arguments='{"not": json'),
            ],
        ),
        Message.tool("call_1", "two cats", name="describe"),
        Message.tool("call_2", "invalid arguments", name="broken", is_error=True),
        Message(role=Role.ASSISTANT, content="Two cats."),
    ]


def _text(n: int) -> Message:
    return Message.user(f"message {n}")


_WORKER = """
import asyncio, sys
from pathlib import Path
from daimon.core import Message

code, worker, count, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])

async def main():
    namespace = {}
    exec(code, namespace)
    async with namespace["memory"] as memory:
        (folder / f"ready-{worker}").touch()
        while not (folder / "go").exists():
            await asyncio.sleep(0.002)
        for i in range(count):
            await memory.add_messages("shared", [Message.user(f"{worker}:{i}")])

asyncio.run(main())
"""


def _run_workers(code: str, workers: int, count: int, folder: Path) -> list[str]:
    """Start the workers, release them together once all are ready; their stderr."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, code, str(w), str(count), str(folder)],
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


class MemoryConformance:
    """Tests every :class:`~daimon.core.Memory` backend must pass."""

    persistent: ClassVar[bool] = True
    """Whether a new handle on the same store sees the history (``False`` for in-process ones)."""

    @pytest.fixture
    async def memory(self, make_memory: MemoryFactory) -> Memory:
        """A handle on the store under test."""
        return await make_memory()

    async def test_unknown_session_is_empty(self, memory: Memory) -> None:
        """A session never written to has no messages."""
        assert await memory.get_messages("nobody-here") == []

    async def test_messages_round_trip(self, memory: Memory) -> None:
        """Messages with parts, images, tool calls and tool results load back equal."""
        messages = sample_messages()
        await memory.add_messages("s", messages)
        assert await memory.get_messages("s") == messages

    async def test_appends_keep_their_order(self, memory: Memory) -> None:
        """Appends keep their order, within and across batches."""
        for start in range(0, 30, 3):
            await memory.add_messages("s", [_text(n) for n in range(start, start + 3)])
        assert await memory.get_messages("s") == [_text(n) for n in range(30)]

    async def test_empty_batch_changes_nothing(self, memory: Memory) -> None:
        """Appending no messages changes nothing."""
        await memory.add_messages("s", [])
        assert await memory.get_messages("s") == []
        await memory.add_messages("s", [_text(1)])
        await memory.add_messages("s", [])
        assert await memory.get_messages("s") == [_text(1)]

    async def test_sessions_are_isolated(self, memory: Memory) -> None:
        """Sessions whose ids look alike never see each other's messages."""
        ids = ["s", "s1", "s:1", "S", "s 1", "sé", "s*", "s/1"]
        for n, session_id in enumerate(ids):
            await memory.add_messages(session_id, [_text(n)])
        for n, session_id in enumerate(ids):
            assert await memory.get_messages(session_id) == [_text(n)], session_id

    async def test_clear_forgets_only_that_session(self, memory: Memory) -> None:
        """``clear`` forgets one session only and is a no-op for unknown ones."""
        await memory.add_messages("a", [_text(1), _text(2)])
        await memory.add_messages("b", [_text(3)])
        await memory.clear("a")
        await memory.clear("never-used")
        assert await memory.get_messages("a") == []
        assert await memory.get_messages("b") == [_text(3)]
        await memory.add_messages("a", [_text(4)])
        assert await memory.get_messages("a") == [_text(4)]

    async def test_an_empty_store_lists_no_session(self, memory: Memory) -> None:
        """A store nothing was written to lists no session; neither does an empty batch."""
        assert await memory.list_sessions() == []
        await memory.add_messages("s", [])
        assert await memory.list_sessions() == []

    async def test_sessions_are_listed_sorted_once_written(self, memory: Memory) -> None:
        """Every session with messages is listed once, sorted, however alike the ids look."""
        ids = ["s", "s1", "s:1", "S", "s 1", "sé", "s*", "s/1", "a[b]", "0"]
        for n, session_id in enumerate(ids):
            await memory.add_messages(session_id, [_text(n)])
        await memory.add_messages("s", [_text(99)])  # a second batch does not list it twice
        assert await memory.list_sessions() == sorted(ids)

    async def test_a_cleared_session_is_not_listed(self, memory: Memory) -> None:
        """``clear`` takes the session off the list; writing again brings it back."""
        await memory.add_messages("a", [_text(1)])
        await memory.add_messages("b", [_text(2)])
        await memory.clear("a")
        await memory.clear("never-used")
        assert await memory.list_sessions() == ["b"]
        await memory.add_messages("a", [_text(3)])
        assert await memory.list_sessions() == ["a", "b"]

    async def test_a_batch_that_cannot_be_stored_stores_nothing(self, memory: Memory) -> None:
        """An unstorable message fails its batch with ``SerializationError``; none is kept."""
        await memory.add_messages("s", [_text(0)])
        unencodable = Message.assistant("", [ToolCall(id="c", name="t", arguments={"x": object()})])
        with pytest.raises(SerializationError):
            await memory.add_messages("s", [_text(1), unencodable, _text(2)])
        with pytest.raises(SerializationError):  # a lone surrogate is not valid Unicode text
            await memory.add_messages("s", [_text(1), Message.user("\ud800"), _text(2)])
        assert await memory.get_messages("s") == [_text(0)]
        with pytest.raises(SerializationError):  # a new session's failed batch does not list it
            await memory.add_messages("t", [unencodable])
        assert await memory.list_sessions() == ["s"]

    async def test_keys_other_serializers_read_as_code_are_kept_as_data(
        self, memory: Memory
    ) -> None:
        """Model-written JSON with ``$type`` or ``__class__`` keys is stored and read back as is."""
        arguments = {"$type": "Order", "__class__": 1, "py/object": {"~$type": [2]}}
        marker = Message.assistant("", [ToolCall(id="c", name="t", arguments=arguments)])
        await memory.add_messages("s", [_text(1), marker])
        assert await memory.get_messages("s") == [_text(1), marker]

    @pytest.mark.parametrize("session_id", ["", "\ud800", "a\0b", "s" * 1025])
    async def test_an_invalid_session_id_is_refused_before_anything_is_stored(
        self, memory: Memory, session_id: str
    ) -> None:
        """Every method refuses an id no backend can hold with ``InvalidIdError``, naming it."""
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: memory.add_messages(session_id, [_text(1)]),
            lambda: memory.get_messages(session_id),
            lambda: memory.clear(session_id),
        ]
        for call in calls:
            with pytest.raises(InvalidIdError, match="invalid session id") as raised:
                await call()
            assert raised.value.value == session_id
        assert await memory.list_sessions() == []

    async def test_concurrent_batches_land_whole(self, make_memory: MemoryFactory) -> None:
        """Batches appended concurrently from two handles land whole, none lost."""
        first, second = await make_memory(), await make_memory()
        batches = [[_text(b * 100 + i) for i in range(5)] for b in range(12)]
        await asyncio.gather(
            *(
                (first if b % 2 else second).add_messages("s", batch)
                for b, batch in enumerate(batches)
            )
        )
        stored = await first.get_messages("s")
        assert len(stored) == 60, f"{len(stored)} messages stored, 60 appended"
        chunks = [stored[i : i + 5] for i in range(0, 60, 5)]
        assert sorted(chunks, key=lambda c: c[0].text) == sorted(batches, key=lambda c: c[0].text)

    async def test_history_survives_a_new_handle(self, make_memory: MemoryFactory) -> None:
        """A new handle (a restarted process) reads what another wrote."""
        if not self.persistent:
            pytest.skip("this backend keeps history in process only")
        await (await make_memory()).add_messages("s", sample_messages())
        assert await (await make_memory()).get_messages("s") == sample_messages()
        assert await (await make_memory()).list_sessions() == ["s"]

    async def test_processes_append_to_one_session_without_loss(
        self, make_memory: MemoryFactory, request: pytest.FixtureRequest, tmp_path: Path
    ) -> None:
        """8 processes x 1,000 appends, started together: 8,000 messages, none lost, no warning."""
        if not self.persistent:
            pytest.skip("this backend keeps history in process only")
        code: str = request.getfixturevalue("memory_code")
        first = await make_memory()
        setup = getattr(first, "setup", None)
        if setup is not None:
            await setup()  # the schema exists before the workers race to use it
        workers, count = 8, 1000
        folder = tmp_path / "workers"
        folder.mkdir()
        errors = await asyncio.to_thread(_run_workers, code, workers, count, folder)
        assert errors == [""] * workers  # nothing reached stderr
        texts = [m.text for m in await (await make_memory()).get_messages("shared")]
        assert len(texts) == workers * count
        for w in range(workers):  # each process's appends, in its order
            assert [t for t in texts if t.startswith(f"{w}:")] == [f"{w}:{i}" for i in range(count)]
