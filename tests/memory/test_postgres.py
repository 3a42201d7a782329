"""PostgresMemory on the real PostgreSQL: the conformance kit, then what is Postgres's own."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest

from daimon.core import BuilderError, DaimonError, Message, SchemaVersionError, SerializationError
from daimon.memory.postgres import PostgresMemory
from daimon.testing.memory import MemoryConformance, sample_messages

pytestmark = pytest.mark.service("postgres")


class TestPostgresMemory(MemoryConformance):
    @pytest.fixture
    async def make_memory(self, postgres_url: str, postgres_prefix: str) -> AsyncIterator[Any]:
        handles: list[PostgresMemory] = []

        async def make() -> PostgresMemory:
            handles.append(PostgresMemory.from_url(postgres_url, prefix=postgres_prefix))
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()

    @pytest.fixture
    def memory_code(self, postgres_url: str, postgres_prefix: str) -> str:
        return (
            "from daimon.memory.postgres import PostgresMemory; "
            f"memory = PostgresMemory({postgres_url!r}, prefix={postgres_prefix!r})"
        )


@pytest.fixture
async def memory(postgres_url: str, postgres_prefix: str) -> AsyncIterator[PostgresMemory]:
    async with PostgresMemory(postgres_url, prefix=postgres_prefix) as handle:
        yield handle


async def sql(url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    """Run one statement on a connection of its own (as an operator or an attacker would)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(query, params or None)
        return await cursor.fetchall() if cursor.description else []


async def test_rows_hold_each_message_as_versioned_json(
    memory: PostgresMemory, postgres_url: str
) -> None:
    await memory.add_messages("s", sample_messages())
    rows = await sql(
        postgres_url,
        f"SELECT seq, message::text FROM {memory.prefix}memory_messages ORDER BY seq",
    )
    assert [seq for seq, _ in rows] == list(range(1, 7))
    assert '"daimon": 1' in rows[0][1] and "\\u0000" in rows[0][1]  # NUL kept, escaped
    assert await sql(
        postgres_url, f"SELECT session_id, last_seq FROM {memory.prefix}memory_sessions"
    ) == [("s", 6)]


@pytest.mark.parametrize(
    "payload",
    [
        '{"daimon":1,"data":{"role":"user","content":"x","__class__":"os.system"}}',
        '{"daimon":1,"data":{"role":"user","content":[{"kind":"text","text":"x","py/object":1}]}}',
        '{"daimon":1,"data":{"kind":"tool_call","id":"x","name":"rm"}}',
        '{"lc":1,"type":"constructor","id":["os","system"],"kwargs":{}}',
        '{"daimon":2,"data":{"role":"user","content":"x"}}',
    ],
    ids=["__class__", "py/object", "type-tag", "langchain", "newer-version"],
)
async def test_planted_code_reviving_payloads_raise_serialization_error(
    memory: PostgresMemory, postgres_url: str, payload: str
) -> None:
    await memory.add_messages("s", [Message.user("fine")])
    await sql(
        postgres_url,
        f"INSERT INTO {memory.prefix}memory_messages VALUES ('s', 2, %s::json)",
        payload,
    )
    with pytest.raises(SerializationError, match=r"session 's', message 2"):
        await memory.get_messages("s")


async def test_a_pickle_cannot_even_be_planted(memory: PostgresMemory, postgres_url: str) -> None:
    await memory.add_messages("s", [Message.user("fine")])
    pickle = b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94."
    with pytest.raises(psycopg.errors.DataError):
        await sql(
            postgres_url,
            f"INSERT INTO {memory.prefix}memory_messages VALUES ('s', 2, %s::json)",
            pickle.decode("latin-1").replace("\x00", ""),
        )
    assert [m.text for m in await memory.get_messages("s")] == ["fine"]


async def test_a_batch_replayed_after_a_lost_reply_is_appended_once(
    memory: PostgresMemory,
) -> None:
    params = {"session": "s", "n": 2, "batch": uuid.uuid4(), "messages": ["", ""]}
    params["messages"] = [
        '{"daimon": 1, "data": {"role": "user", "content": "a"}}',
        '{"daimon": 1, "data": {"role": "user", "content": "b"}}',
    ]

    async def append(conn: Any) -> None:
        await conn.execute(memory._append, params)

    await memory._run(append)
    await memory._run(append)  # the replay
    assert [m.text for m in await memory.get_messages("s")] == ["a", "b"]
    params["batch"] = uuid.uuid4()  # an equal batch from another writer is appended
    await memory._run(append)
    assert [m.text for m in await memory.get_messages("s")] == ["a", "b", "a", "b"]


async def _waiting_backend(killer: Any, name: str) -> int:
    """The pid of the connection named ``name`` once it waits on a lock."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cursor = await killer.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'",
            (name,),
        )
        row = await cursor.fetchone()
        if row:
            return int(row[0])
        await asyncio.sleep(0.005)
    raise AssertionError(f"no connection named {name!r} waited on a lock within 10 s")


@pytest.mark.parametrize("kills", [1, 3])
async def test_a_killed_connection_loses_no_acknowledged_write(
    postgres_url: str, postgres_prefix: str, kills: int
) -> None:
    """Every fifth append's backend is terminated mid-statement (``pg_terminate_backend``), while
    it waits for the session's row. Killed once, the append is tried again and lands once; killed
    on every try, it raises and leaves nothing. Every acknowledged append is kept, once."""
    name = f"daimon-test-{uuid.uuid4().hex[:12]}"
    sessions = f"{postgres_prefix}memory_sessions"
    acknowledged: list[str] = []
    failures: list[Exception] = []
    async with (
        PostgresMemory(f"{postgres_url}?application_name={name}", prefix=postgres_prefix) as mem,
        await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as killer,
    ):
        await mem.add_messages("s", [Message.user("first")])
        acknowledged.append("first")
        for n in range(30):
            append = mem.add_messages("s", [Message.user(f"{n}a"), Message.user(f"{n}b")])
            try:
                if n % 5:
                    await append
                else:
                    async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
                        await blocker.execute(f"SELECT 1 FROM {sessions} FOR UPDATE")
                        appending = asyncio.ensure_future(append)
                        for _ in range(kills):
                            pid = await _waiting_backend(killer, name)
                            await killer.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
                        await blocker.rollback()
                        await asyncio.wait({appending})
                    await appending
            except psycopg.OperationalError as exc:
                failures.append(exc)
            else:
                acknowledged += [f"{n}a", f"{n}b"]
        assert [m.text for m in await mem.get_messages("s")] == acknowledged
    assert len(failures) == (0 if kills == 1 else 6)


async def test_a_clear_racing_an_append_leaves_no_orphan(
    memory: PostgresMemory, postgres_url: str
) -> None:
    """A clear that waited for an append removes what it appended; the session starts over."""
    await memory.add_messages("s", [Message.user("old")])
    async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
        await blocker.execute(f"SELECT 1 FROM {memory.prefix}memory_sessions FOR UPDATE")
        appending = asyncio.ensure_future(memory.add_messages("s", [Message.user("mid")]))
        await asyncio.sleep(0.2)
        clearing = asyncio.ensure_future(memory.clear("s"))
        await asyncio.sleep(0.2)
        await blocker.rollback()
    await appending
    await clearing
    assert await memory.get_messages("s") == []
    await memory.add_messages("s", [Message.user("new")])
    assert [m.text for m in await memory.get_messages("s")] == ["new"]


async def test_schema_is_created_on_first_use_and_a_newer_one_is_refused(
    postgres_url: str, postgres_prefix: str
) -> None:
    memory = PostgresMemory(postgres_url, prefix=postgres_prefix)
    try:
        assert await memory.list_sessions() == []  # migrated on first use
    finally:
        await memory.aclose()
    assert await sql(
        postgres_url,
        f"SELECT version FROM {postgres_prefix}schema_versions WHERE component = 'memory'",
    ) == [(1,)]
    await sql(postgres_url, f"UPDATE {postgres_prefix}schema_versions SET version = 2")
    memory = PostgresMemory(postgres_url, prefix=postgres_prefix)
    try:
        with pytest.raises(SchemaVersionError, match="memory tables are at version 2"):
            await memory.get_messages("s")
    finally:
        await memory.aclose()


async def test_aclose_is_idempotent_and_final(postgres_url: str, postgres_prefix: str) -> None:
    memory = PostgresMemory(postgres_url, prefix=postgres_prefix)
    await memory.add_messages("s", [Message.user("x")])
    await memory.aclose()
    await memory.aclose()
    with pytest.raises(DaimonError, match="closed"):
        await memory.get_messages("s")


@pytest.mark.parametrize("bad", [{"prefix": "no-dashes"}, {"min_size": 0}, {"max_size": -1}])
def test_bad_options_are_refused_at_construction(postgres_url: str, bad: dict[str, Any]) -> None:
    with pytest.raises(BuilderError):
        PostgresMemory(postgres_url, **bad)


def test_a_missing_client_library_names_its_extra(
    import_without: Callable[[str, str], tuple[str, str, str]],
) -> None:
    for module in ("daimon.memory.postgres", "daimon.checkpoint.postgres"):
        extra, _, message = import_without(module, "psycopg")
        assert extra == "postgres"
        assert 'pip install "daimon-agents[postgres]"' in message
