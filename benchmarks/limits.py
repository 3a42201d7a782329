"""Limit stores: the cost of one reserve + settle pair that does not wait, per store.

Usage: python benchmarks/limits.py [--pairs N] [--only none,memory,redis,postgres]

One client, one key, limits far above what the run asks for (nothing waits): each pair is
``reserve`` (admitted at once) then ``settle`` of a new ticket, awaited one after another;
``Limiter.slot`` adds the ticket's making and the ``async with`` around the same pair.
``none`` is a bare ``await`` of a coroutine that returns at once: the floor. Redis and
PostgreSQL are the local services (``BENCH_REDIS``, ``BENCH_POSTGRES``); their keys and tables
are removed afterwards. Prints µs per pair: mean, p50 and p99 of the direct pairs, and the mean
through ``Limiter.slot``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from daimon.core.limits import LimitStore, RateLimits, Ticket
from daimon.limits import Limiter, MemoryLimitStore

REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
POSTGRES = os.environ.get("BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
LIMITS = RateLimits(
    requests_per_minute=10**9,
    input_tokens_per_minute=10**12,
    output_tokens_per_minute=10**12,
    concurrent=1000,
)
WARMUP = 100


def _ticket() -> Ticket:
    return Ticket(id=uuid.uuid4().hex, arrived=time.time(), input_tokens=500, output_tokens=200)


async def _nothing() -> None:
    return None


async def _pairs(store: LimitStore | None, pairs: int) -> list[float]:
    """Seconds per reserve + settle pair (a bare await when ``store`` is None)."""
    took = []
    for _ in range(pairs):
        ticket = _ticket()
        started = time.perf_counter()
        if store is None:
            await _nothing()
        else:
            assert await store.reserve("bench", LIMITS, ticket) == 0.0
            await store.settle("bench", LIMITS, ticket, 480, 150)
        took.append(time.perf_counter() - started)
    return took


async def _slots(limiter: Limiter, pairs: int) -> float:
    """Mean seconds per ``Limiter.slot`` block that settles."""
    started = time.perf_counter()
    for _ in range(pairs):
        async with limiter.slot("bench", input_tokens=500, output_tokens=200) as slot:
            slot.settle(480, 150)
    return (time.perf_counter() - started) / pairs


async def _redis() -> tuple[LimitStore, Callable[[], Awaitable[None]]]:
    import redis.asyncio as aioredis

    from daimon.limits.redis import RedisLimitStore

    prefix = f"daimon-bench:{uuid.uuid4().hex}:"
    store = RedisLimitStore(REDIS, prefix=prefix)

    async def cleanup() -> None:
        await store.aclose()
        client = aioredis.Redis.from_url(REDIS)
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()

    return store, cleanup


async def _postgres() -> tuple[LimitStore, Callable[[], Awaitable[None]]]:
    import psycopg

    from daimon.limits.postgres import PostgresLimitStore

    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    store = PostgresLimitStore(POSTGRES, prefix=prefix, max_size=1)

    async def cleanup() -> None:
        await store.aclose()
        async with await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{prefix}%",)
            )
            for (table,) in await cursor.fetchall():
                await conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
            cursor = await conn.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE proname LIKE %s",
                (f"{prefix}%",),
            )
            for (function,) in await cursor.fetchall():
                await conn.execute(f"DROP FUNCTION IF EXISTS {function}")

    return store, cleanup


async def _memory() -> tuple[LimitStore, Callable[[], Awaitable[None]]]:
    store = MemoryLimitStore()
    return store, store.aclose


STORES: dict[str, Callable[[], Awaitable[tuple[LimitStore, Callable[[], Awaitable[None]]]]]] = {
    "memory": _memory,
    "redis": _redis,
    "postgres": _postgres,
}


async def measure(name: str, pairs: int) -> dict[str, Any]:
    """One row of the table: µs per pair for store ``name``."""
    if name == "none":
        await _pairs(None, WARMUP)
        took = await _pairs(None, pairs)
        slot = None
    else:
        store, cleanup = await STORES[name]()
        try:
            await _pairs(store, WARMUP)
            took = await _pairs(store, pairs)
            slot = await _slots(Limiter(LIMITS, store), pairs)
        finally:
            await cleanup()
    cuts = statistics.quantiles(took, n=100)
    return {
        "store": name,
        "mean": statistics.fmean(took) * 1e6,
        "p50": cuts[49] * 1e6,
        "p99": cuts[98] * 1e6,
        "slot": None if slot is None else slot * 1e6,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--only", default="none,memory,redis,postgres")
    options = parser.parse_args()
    rows = [await measure(name, options.pairs) for name in options.only.split(",")]
    print(f"reserve + settle, {options.pairs} pairs, one client; µs per pair")
    print(f"{'store':<10}{'mean':>10}{'p50':>10}{'p99':>10}{'Limiter.slot':>14}")
    for row in rows:
        slot = "-" if row["slot"] is None else f"{row['slot']:.1f}"
        print(
            f"{row['store']:<10}{row['mean']:>10.1f}{row['p50']:>10.1f}{row['p99']:>10.1f}"
            f"{slot:>14}"
        )


if __name__ == "__main__":
    asyncio.run(main())
