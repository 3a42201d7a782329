from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import psycopg
import pytest

from daimon.core import BuilderError, StateStore
from daimon.kit.sql_schema import Schema, migrate, schema_version
from daimon.serverstate.postgres import SCHEMA, PostgresStateStore
from daimon.testing.state_store import StateStoreConformance, StateStoreFactory

pytestmark = pytest.mark.service("postgres")


class TestPostgresStateStore(StateStoreConformance):
    @pytest.fixture
    async def make_store(
        self, postgres_url: str, postgres_prefix: str
    ) -> AsyncIterator[StateStoreFactory]:
        handles: list[PostgresStateStore] = []

        async def make() -> StateStore:
            handles.append(PostgresStateStore(postgres_url, prefix=postgres_prefix))
            await handles[-1].setup()
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def store(postgres_url: str, postgres_prefix: str) -> AsyncIterator[PostgresStateStore]:
    async with PostgresStateStore(postgres_url, prefix=postgres_prefix) as opened:
        yield opened


async def _count(url: str, table: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(f"SELECT count(*) FROM {table}")).fetchone()
        assert row is not None
        return int(row[0])


async def test_tables_are_versioned(
    store: PostgresStateStore, postgres_url: str, postgres_prefix: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        assert await schema_version(conn, "server_state", postgres_prefix) == SCHEMA.version == 2
    await store.setup()  # again: nothing to do


async def test_prune_deletes_expired_rows(
    store: PostgresStateStore, postgres_url: str, postgres_prefix: str
) -> None:
    await store.put("response", "gone", "1", ttl=0.2)
    await store.put("response", "kept", "1")
    for _ in range(3):
        await store.append("mcp_event", "gone", "1", ttl=0.2)
    await store.append("mcp_event", "kept", "1", ttl=60)
    await asyncio.sleep(0.4)
    assert await store.prune() == 1 + 3 + 1
    assert await _count(postgres_url, f"{postgres_prefix}state_records") == 1
    assert await _count(postgres_url, f"{postgres_prefix}state_events") == 1
    assert await store.get("response", "kept") == "1"


async def test_a_stream_appended_after_expiry_drops_its_old_events(
    store: PostgresStateStore, postgres_url: str, postgres_prefix: str
) -> None:
    for _ in range(3):
        await store.append("mcp_event", "s", '"old"', ttl=0.2)
    await asyncio.sleep(0.4)
    number = await store.append("mcp_event", "s", '"new"')
    assert await store.read_after("mcp_event", "s") == [(number, '"new"')]
    assert await _count(postgres_url, f"{postgres_prefix}state_events") == 1


async def test_a_wait_survives_a_lost_listening_connection(
    store: PostgresStateStore, postgres_url: str, postgres_prefix: str
) -> None:
    waiting = asyncio.ensure_future(store.wait_after("mcp_event", "s", 0, wait=10))
    await asyncio.sleep(0.3)
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
            (f"LISTEN {postgres_prefix}state_events",),
        )
        assert [row[0] for row in await cursor.fetchall()] == [True]
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await store.append("mcp_event", "s", '"after"')
    assert await asyncio.wait_for(waiting, 10) == [(1, '"after"')]
    assert time.monotonic() - started < 2.0


async def test_settings_are_checked(postgres_url: str) -> None:
    for options in ({"prefix": "Bad-Prefix"}, {"min_size": 0}, {"min_size": 3, "max_size": 2}):
        with pytest.raises(BuilderError):
            PostgresStateStore(postgres_url, **options)
    with pytest.raises(BuilderError):
        PostgresStateStore("")


async def test_streams_are_unlogged_and_a_version_1_database_keeps_its_rows(
    postgres_url: str, postgres_prefix: str
) -> None:
    first = Schema(component=SCHEMA.component, steps=SCHEMA.steps[:1])
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await migrate(conn, first, postgres_prefix)
        await conn.execute(
            f"INSERT INTO {postgres_prefix}state_streams (kind, stream, last_seq) "
            "VALUES ('log', 's1', 1)"
        )
        await conn.execute(
            f"INSERT INTO {postgres_prefix}state_events (kind, stream, seq, value) "
            "VALUES ('log', 's1', 1, '\"kept\"')"
        )
    async with PostgresStateStore(postgres_url, prefix=postgres_prefix) as store:
        assert await store.read_after("log", "s1") == [(1, '"kept"')]
        assert await store.append("log", "s1", '"more"') == 2
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT relname, relpersistence FROM pg_class WHERE relname = ANY(%s)",
            ([f"{postgres_prefix}state_{name}" for name in ("records", "streams", "events")],),
        )
        kinds = {name.removeprefix(postgres_prefix): kind for name, kind in await cursor.fetchall()}
    assert kinds == {"state_records": "p", "state_streams": "u", "state_events": "u"}
