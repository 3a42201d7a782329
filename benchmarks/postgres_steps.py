"""What one checkpointed step costs, per store: the latency of one ``save``, p50 and p99.

Usage (from the repository root; PostgreSQL on 127.0.0.1:5432 db ``test`` and Redis on
127.0.0.1:6379 for those):

    .venv/bin/python benchmarks/postgres_steps.py [--rounds 4] [--saves 500] \
        [--stores postgres,redis,file]

In each round, each store in turn saves ``--saves`` checkpoints of one run, one after another,
from a handle that holds the run's lease (as an agent does: each save is fenced by the lease),
with a state the size of a short ReAct run (a few messages, one tool result); the rounds
interleave the stores so that load from elsewhere on the machine falls on each alike. The first
50 saves of each round warm up and are not counted. PostgreSQL tables and Redis keys get a fresh
prefix and are dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from daimon.core import CheckpointState, Message, ToolCall
from daimon.core.tools import ToolOutput

POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
WARMUP = 50


def state(run_id: str, iteration: int) -> CheckpointState:
    """A state the size of a short ReAct run."""
    return CheckpointState(
        run_id=run_id,
        messages=(
            Message.system("You are a helpful assistant."),
            Message.user("What is 2 + 3? Use the tool."),
            Message.assistant("", [ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3})]),
            Message.tool("c1", "5", name="add"),
        ),
        iteration=iteration,
        completed_tool_results={"c1": ToolOutput.text("5")},
    )


@asynccontextmanager
async def open_store(kind: str) -> AsyncIterator[Any]:
    if kind == "file":
        from daimon.checkpoint import FileCheckpoint

        with tempfile.TemporaryDirectory() as folder:
            yield FileCheckpoint(folder)
    elif kind == "redis":
        from daimon.checkpoint import RedisCheckpoint

        prefix = f"bench:{uuid.uuid4().hex}:"
        async with RedisCheckpoint.from_url(REDIS, prefix=prefix) as store:
            try:
                yield store
            finally:
                await store.delete("bench")
    else:
        import psycopg

        from daimon.checkpoint import PostgresCheckpoint

        prefix = f"bench_{uuid.uuid4().hex[:12]}_"
        try:
            async with PostgresCheckpoint.from_url(POSTGRES, prefix=prefix) as store:
                yield store
        finally:
            async with await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True) as conn:
                for table in ("checkpoints", "checkpoint_leases", "schema_versions"):
                    await conn.execute(f"DROP TABLE IF EXISTS {prefix}{table}")


async def measure(kind: str, saves: int) -> list[float]:
    """Milliseconds of each counted save."""
    took: list[float] = []
    async with open_store(kind) as store:
        lease = await store.acquire("bench")
        for n in range(saves + WARMUP):
            started = time.perf_counter()
            await store.save(state("bench", n))
            if n >= WARMUP:
                took.append((time.perf_counter() - started) * 1000)
            if n % 100 == 0:
                lease = await store.renew(lease)
        await store.release(lease)
    return took


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(p) - 1]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--saves", type=int, default=500)
    parser.add_argument("--stores", default="postgres,redis,file")
    args = parser.parse_args()
    kinds = args.stores.split(",")
    timings: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            timings[kind] += await measure(kind, args.saves)
    print(f"{'store':<10}{'saves':>7}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
    for kind, took in timings.items():
        print(
            f"{kind:<10}{len(took):>7}{percentile(took, 50):>9.3f}{percentile(took, 99):>9.3f}"
            f"{statistics.fmean(took):>9.3f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
