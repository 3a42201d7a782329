"""What a checkpointed run costs, per store: a ReAct run (model -> tool -> model) saved as it goes.

Usage (from the repository root; Redis on 127.0.0.1:6379 and NATS on 127.0.0.1:4222 for those):

    .venv/bin/python benchmarks/checkpoint_runs.py [--rounds 5] [--runs 200] [--stores file,nats]

Prints, per store, the median over rounds of the mean milliseconds per run, each run a new
``run_id``. Run it against two checkouts (``PYTHONPATH=<checkout>/src``) to compare them: since
run leases, a checkpointed run also takes its lease before it loads the run (one store operation),
starts a renewal task, and releases the lease at its end (one more), while each save checks the
lease in the same request (Redis) or with one ``stat`` (file) or not at all (NATS, by clock).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.models import FunctionModel


def one_call(request: ChatRequest) -> ChatResponse:
    if not any(m.role is Role.TOOL for m in request.messages):
        return ChatResponse.tool_use(ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}))
    return ChatResponse.reply("5")


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@asynccontextmanager
async def open_store(kind: str) -> AsyncIterator[Any]:
    if kind == "file":
        from daimon.checkpoint import FileCheckpoint

        with tempfile.TemporaryDirectory() as folder:
            yield FileCheckpoint(folder)
    elif kind == "redis":
        from daimon.checkpoint import RedisCheckpoint

        async with RedisCheckpoint.from_url(
            "redis://127.0.0.1:6379/0", prefix=f"bench:{uuid.uuid4().hex}:"
        ) as store:
            yield store
    else:
        import nats

        from daimon.checkpoint import NatsKVCheckpoint

        bucket = f"bench_{uuid.uuid4().hex}"
        async with NatsKVCheckpoint.from_url("nats://127.0.0.1:4222", bucket=bucket) as store:
            yield store
        nc = await nats.connect("nats://127.0.0.1:4222")
        await nc.jetstream().delete_key_value(bucket)
        await nc.close()


async def round_ms(kind: str, runs: int) -> float:
    async with open_store(kind) as store:
        agent = Agent(FunctionModel(one_call), tools=[add], checkpoint=store)
        await agent.prompt("warm up", run_id=uuid.uuid4().hex)
        started = time.perf_counter()
        for _ in range(runs):
            await agent.prompt("add 2 and 3", run_id=uuid.uuid4().hex)
        return (time.perf_counter() - started) * 1000 / runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--stores", default="file,redis,nats")
    options = parser.parse_args()
    kinds = options.stores.split(",")
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    measure: Callable[[str], float] = lambda kind: asyncio.run(round_ms(kind, options.runs))  # noqa: E731
    for n in range(options.rounds):
        for kind in kinds[n % len(kinds) :] + kinds[: n % len(kinds)]:  # rotate the order
            results[kind].append(measure(kind))
    for kind in kinds:
        print(f"{kind:6} {statistics.median(results[kind]):8.3f} ms per checkpointed run")


if __name__ == "__main__":
    main()
