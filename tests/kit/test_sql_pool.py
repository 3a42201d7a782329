"""A PostgreSQL store's connections on the real server: migrated once, retried on a dead one."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from daimon.core import BuilderError, DaimonError
from daimon.kit.sql_pool import Connections
from daimon.kit.sql_schema import Schema, schema_version

pytestmark = pytest.mark.service("postgres")

NOTES = Schema("notes", ("CREATE TABLE {prefix}notes (id text PRIMARY KEY)",))


def connections(url: str, prefix: str, size: int = 4) -> Connections:
    return Connections(
        url, schema=NOTES, prefix=prefix, min_size=size, max_size=size, name="TestStore"
    )


async def terminate(url: str, application: str) -> int:
    """End every server process of connections named ``application``; how many there were."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        cursor = await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application,),
        )
        return len(await cursor.fetchall())


async def test_the_schema_is_migrated_before_the_first_operation(
    postgres_url: str, postgres_prefix: str
) -> None:
    db = connections(postgres_url, postgres_prefix, size=1)
    try:

        async def version(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> int:
            return await schema_version(conn, "notes", postgres_prefix)

        assert await db.run(version) == 1
    finally:
        await db.aclose()
    with pytest.raises(DaimonError, match="TestStore is closed"):
        await db.pool()


async def test_an_operation_after_every_connection_died_succeeds(
    postgres_url: str, postgres_prefix: str
) -> None:
    """A server restart leaves every idle connection dead: each is checked as it is taken."""
    application = f"daimon-test-{uuid.uuid4().hex[:8]}"
    db = connections(f"{postgres_url}?application_name={application}", postgres_prefix)
    table = f"{postgres_prefix}notes"

    async def insert(conn: psycopg.AsyncConnection[tuple[object, ...]], key: str) -> None:
        await conn.execute(f"INSERT INTO {table} (id) VALUES (%s)", (key,))
        await asyncio.sleep(0.05)  # keeps all four connections busy at once

    try:
        await asyncio.gather(*(db.run(lambda c, k=k: insert(c, k)) for k in "abcd"))
        assert await terminate(postgres_url, application) == 4
        await db.run(lambda c: insert(c, "e"))
    finally:
        await db.aclose()
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        cursor = await conn.execute(f"SELECT id FROM {table} ORDER BY id")
        assert [row[0] for row in await cursor.fetchall()] == list("abcde")


@pytest.mark.parametrize(
    ("target", "options", "message"),
    [
        ("", {}, "url must be a PostgreSQL connection string"),
        (42, {}, "expected a PostgreSQL URL or a psycopg_pool.AsyncConnectionPool"),
        ("postgresql://x", {"min_size": 3, "max_size": 2}, r"max_size \(2\) is below"),
        ("postgresql://x", {"prefix": "Bad"}, "table prefix"),
    ],
)
def test_bad_settings_are_refused_at_construction(
    target: object, options: dict[str, object], message: str
) -> None:
    settings: dict[str, object] = {"prefix": "ok_", "min_size": 1, "max_size": 2, **options}
    with pytest.raises(BuilderError, match=message):
        Connections(target, schema=NOTES, name="TestStore", **settings)  # type: ignore[arg-type]
