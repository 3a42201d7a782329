"""PostgresLimitStore against the limit-store conformance suite, and its rows' expiry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest

from daimon.core.limits import LimitStore, RateLimits
from daimon.limits import Limiter
from daimon.limits.postgres import PostgresLimitStore
from daimon.testing.limits import LimitStoreConformance, ticket

pytestmark = pytest.mark.service("postgres")


@pytest.fixture
async def prefix(postgres_url: str, postgres_prefix: str) -> AsyncIterator[str]:
    """``postgres_prefix``, whose functions are dropped too (it drops the tables only)."""
    yield postgres_prefix
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE %s",
            (f"{postgres_prefix}limits\\_%",),
        )
        for (function,) in await cursor.fetchall():
            await conn.execute(f"DROP FUNCTION IF EXISTS {function} CASCADE")


class TestPostgresLimitStore(LimitStoreConformance):
    @pytest.fixture
    async def make_store(
        self, postgres_url: str, prefix: str
    ) -> AsyncIterator[Callable[..., Awaitable[LimitStore]]]:
        """Each handle with its own pool, as another process would have."""
        handles: list[PostgresLimitStore] = []

        async def make(**options: Any) -> LimitStore:
            handles.append(PostgresLimitStore(postgres_url, prefix=prefix, **options))
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


async def _count(url: str, table: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(f"SELECT count(*) FROM {table}")
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_expired_state_is_deleted_by_later_calls(postgres_url: str, prefix: str) -> None:
    """A key nobody uses any more goes, with its waiters and admissions, on another's reserve."""
    store = PostgresLimitStore(postgres_url, prefix=prefix, waiter_ttl=0.1)
    try:
        limits = RateLimits(requests_per_minute=1, concurrent=1, period=0.05)
        assert await store.reserve("dead", limits, ticket()) == 0.0
        assert await store.reserve("dead", limits, ticket()) > 0  # a waiter, then nobody asks
        tables = [f"{prefix}limit_{name}" for name in ("keys", "waiters", "tickets")]
        assert [await _count(postgres_url, t) for t in tables] == [1, 1, 1]
        await asyncio.sleep(0.4)  # past 5 * period and the waiter's ttl
        assert await store.reserve("live", limits, ticket()) == 0.0
        assert [await _count(postgres_url, t) for t in tables] == [1, 0, 1]  # live's only
    finally:
        await store.aclose()


async def test_the_limiter_opens_it_from_a_url(postgres_url: str, prefix: str) -> None:
    limiter = Limiter.from_url(
        postgres_url, RateLimits(requests_per_minute=5), prefix=prefix, waiter_ttl=1.0
    )
    try:
        assert isinstance(limiter.store, PostgresLimitStore)
        async with limiter.slot("k", input_tokens=10) as slot:
            slot.settle(12, 3)
    finally:
        await limiter.aclose()
