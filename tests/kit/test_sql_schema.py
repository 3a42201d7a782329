"""Versioned schemas on the real PostgreSQL: each step once, in order; newer databases refused."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from daimon.core import BuilderError, SchemaVersionError
from daimon.kit.sql_schema import Schema, check_prefix, migrate, schema_version

pytestmark = pytest.mark.service("postgres")

V1 = Schema("notes", ("CREATE TABLE {prefix}notes (id text PRIMARY KEY)",))
V2 = Schema("notes", (*V1.steps, "ALTER TABLE {prefix}notes ADD COLUMN body text"))


async def connect(url: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    return await psycopg.AsyncConnection.connect(url, autocommit=True)


async def columns(url: str, table: str) -> list[str]:
    async with await connect(url) as conn:
        cursor = await conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "ORDER BY ordinal_position",
            (table,),
        )
        return [row[0] for row in await cursor.fetchall()]


async def test_a_new_database_gets_every_step_and_its_version(
    postgres_url: str, postgres_prefix: str
) -> None:
    async with await connect(postgres_url) as conn:
        assert await schema_version(conn, "notes", postgres_prefix) == 0
        assert await migrate(conn, V2, postgres_prefix) == 0
        assert await schema_version(conn, "notes", postgres_prefix) == 2
        assert await migrate(conn, V2, postgres_prefix) == 2  # again: nothing to do
    assert await columns(postgres_url, f"{postgres_prefix}notes") == ["id", "body"]


async def test_an_older_version_is_upgraded_by_the_missing_steps(
    postgres_url: str, postgres_prefix: str
) -> None:
    async with await connect(postgres_url) as conn:
        await migrate(conn, V1, postgres_prefix)
        await conn.execute(f"INSERT INTO {postgres_prefix}notes (id) VALUES ('kept')")
        assert await migrate(conn, V2, postgres_prefix) == 1
        cursor = await conn.execute(f"SELECT id, body FROM {postgres_prefix}notes")
        assert await cursor.fetchall() == [("kept", None)]


async def test_a_database_newer_than_this_daimon_is_refused(
    postgres_url: str, postgres_prefix: str
) -> None:
    async with await connect(postgres_url) as conn:
        await migrate(conn, V2, postgres_prefix)
        with pytest.raises(SchemaVersionError, match=r"notes tables are at version 2.*knows \(1\)"):
            await migrate(conn, V1, postgres_prefix)


async def test_processes_migrating_at_once_apply_each_step_once(
    postgres_url: str, postgres_prefix: str
) -> None:
    """Without the lock, the second CREATE TABLE of a race fails."""
    conns = [await connect(postgres_url) for _ in range(4)]
    try:
        found = await asyncio.gather(*(migrate(c, V2, postgres_prefix) for c in conns))
    finally:
        for conn in conns:
            await conn.close()
    assert sorted(found) == [0, 2, 2, 2]


@pytest.mark.parametrize("prefix", ["", "Daimon_", "1x", "a-b", "x" * 41, 7])
def test_a_prefix_that_cannot_start_a_table_name_is_refused(prefix: object) -> None:
    with pytest.raises(BuilderError, match="table prefix"):
        check_prefix(prefix)
