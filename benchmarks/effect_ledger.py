"""What the effect ledger costs a run, per checkpoint store: a tool with ``effect="once"`` against
the default ``repeatable`` one, and the ``repeatable`` run against the tree before the ledger.

Usage (from the repository root; Redis on 127.0.0.1:6379 for the ``redis`` store):

    git worktree add --detach /tmp/before 0f39d96     # the tree before the ledger (optional)
    .venv/bin/python benchmarks/effect_ledger.py [--rounds 6] [--runs 40]
        [--stores none,file,redis,postgres] [--before /tmp/before/src] [--after OTHER/src]

The run: a ``FunctionModel`` asks for ``add(a=2, b=3)``, the tool runs (``async def``), the model
answers; every run has a new ``run_id`` and every answer is checked. Stores: ``none`` (no
checkpoint: nothing is recorded whatever the effect), ``file`` (``FileCheckpoint`` in a temporary
folder, fsynced), ``redis`` (``RedisCheckpoint``, local), ``postgres`` (``PostgresCheckpoint`` on
the local PostgreSQL, under a table prefix of its own, dropped afterwards).

Each round starts fresh interpreters with a tree's ``src`` first on ``PYTHONPATH``, one after
the other: ``ledger`` (``--after``, every store with both effects), then with ``--before`` also
``before`` and ``after`` (each tree's ``repeatable`` cells only, the same work in both), which of
the two first alternating each round (give an even ``--rounds``).
Inside an interpreter the cells take turns in blocks after 20 warm-up runs each (the stores in
an order rotated each block, a store's two effects back to back, which goes first alternating);
a cell's figures for the round are the median of its runs' wall times (``--runs`` per
checkpointed cell, ten times as many without a checkpoint) and the process's CPU time per run
(every thread, so a file store's ``fsync`` counts; median over the blocks). Prints the medians
over rounds, the median of the rounds' differences, every round's figures, and the 1-minute
load average before each round and after the last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

HERE_SRC = Path(__file__).resolve().parent.parent / "src"
REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
EFFECTS = ("repeatable", "once")
BLOCKS = 10
"""Blocks per cell and round: the cells of one interpreter take turns, a block each."""
WARM_UP = 20


class StoreMissing(Exception):
    """The store cannot be measured in this tree (the reason is the message)."""


# ---------------------------------------------------------------- the worker (one interpreter)


def one_call(request: Any) -> Any:
    from daimon import ChatResponse, Role, ToolCall

    if not any(m.role is Role.TOOL for m in request.messages):
        return ChatResponse.tool_use(ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}))
    return ChatResponse.reply("5")


def make_tool(effect: str) -> Any:
    """``add``; ``repeatable`` is the default, so it is declared as before the ledger existed."""
    from daimon import tool

    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return tool(add) if effect == "repeatable" else tool(effect=effect)(add)


@asynccontextmanager
async def open_store(kind: str) -> AsyncIterator[Any]:
    """The checkpoint store ``kind`` (``None`` for ``none``), removed with what it wrote."""
    if kind == "none":
        yield None
    elif kind == "file":
        from daimon.checkpoint import FileCheckpoint

        with tempfile.TemporaryDirectory(prefix="daimon-ledger-") as folder:
            yield FileCheckpoint(folder)
    elif kind == "redis":
        async with open_redis() as store:
            yield store
    elif kind == "postgres":
        async with open_postgres() as store:
            yield store
    else:
        raise SystemExit(f"unknown store {kind!r}: none, file, redis or postgres")


@asynccontextmanager
async def open_redis() -> AsyncIterator[Any]:
    import redis.asyncio

    from daimon.checkpoint import RedisCheckpoint

    prefix = f"bench:ledger:{uuid.uuid4().hex}:"
    async with RedisCheckpoint.from_url(REDIS_URL, prefix=prefix) as store:
        yield store
    client = redis.asyncio.from_url(REDIS_URL)
    keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@asynccontextmanager
async def open_postgres() -> AsyncIterator[Any]:
    import daimon.checkpoint

    if not hasattr(daimon.checkpoint, "PostgresCheckpoint"):
        raise StoreMissing("not a checkpoint store in this tree")
    import psycopg

    prefix = f"bench_{uuid.uuid4().hex[:12]}_"
    async with daimon.checkpoint.PostgresCheckpoint.from_url(POSTGRES_URL, prefix=prefix) as store:
        yield store
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{prefix}%",)
        )
        for (table,) in await cursor.fetchall():
            await conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


async def check_ledger(store: Any, run_id: str, effect: str) -> None:
    """The run's checkpoint holds a completed ``once`` record, or none for ``repeatable``."""
    saved = await store.load(run_id)
    effects = getattr(saved, "effects", {})
    statuses = [record.status for record in effects.values()]
    if statuses != (["completed"] if effect == "once" else []):
        raise SystemExit(f"{effect} run {run_id}: ledger {statuses}, expected one 'completed'")


async def time_runs(agent: Any, runs: int) -> tuple[list[float], float]:
    """Wall seconds of each run (a new run id each) and the process's CPU seconds per run."""
    times = []
    cpu = time.process_time()
    for _ in range(runs):
        run_id = uuid.uuid4().hex
        started = time.perf_counter()
        response = await agent.prompt("add 2 and 3", run_id=run_id)
        times.append(time.perf_counter() - started)
        if response.output != "5":
            raise SystemExit(f"run {run_id} answered {response.output!r}")
    return times, (time.process_time() - cpu) / runs


def block_order(cells: list[tuple[str, str]], block: int) -> list[tuple[str, str]]:
    """The stores in an order rotated each block, a store's cells one after the other, which of
    them goes first alternating (so both effects follow the same cells equally often)."""
    stores = list(dict.fromkeys(kind for kind, _ in cells))
    shift = block % len(stores) if stores else 0
    order = []
    for kind in stores[shift:] + stores[:shift]:
        mine = [cell for cell in cells if cell[0] == kind]
        order += mine if block % 2 == 0 else mine[::-1]
    return order


async def measure(cells: list[tuple[str, str]], runs: int) -> dict[str, Any]:
    """Median µs per run of each (store, effect) cell, the cells alternating in blocks."""
    from daimon import Agent
    from daimon.models import FunctionModel

    agents: dict[tuple[str, str], Any] = {}
    missing: dict[str, str] = {}
    async with AsyncExitStack() as stack:
        for kind in dict.fromkeys(kind for kind, _ in cells):
            try:
                store = await stack.enter_async_context(open_store(kind))
            except StoreMissing as why:
                missing[kind] = str(why)
                continue
            for effect in (e for k, e in cells if k == kind):
                agent = Agent(FunctionModel(one_call), tools=[make_tool(effect)], checkpoint=store)
                await time_runs(agent, WARM_UP)
                if store is not None:
                    run_id = uuid.uuid4().hex
                    await agent.prompt("add 2 and 3", run_id=run_id)
                    await check_ledger(store, run_id, effect)
                agents[(kind, effect)] = agent
        times: dict[tuple[str, str], list[float]] = {cell: [] for cell in agents}
        cpus: dict[tuple[str, str], list[float]] = {cell: [] for cell in agents}
        for block in range(BLOCKS):
            for cell in block_order(list(agents), block):
                n = runs * 10 if cell[0] == "none" else runs
                walls, cpu = await time_runs(agents[cell], max(1, n // BLOCKS))
                times[cell] += walls
                cpus[cell].append(cpu)
    import daimon

    return {
        "us": {f"{k}/{e}": statistics.median(t) * 1e6 for (k, e), t in times.items()},
        "cpu_us": {f"{k}/{e}": statistics.median(c) * 1e6 for (k, e), c in cpus.items()},
        "missing": missing,
        "daimon": daimon.__file__,
    }


def worker(spec: str, runs: int) -> None:
    cells = [tuple(cell.split("/", 1)) for cell in spec.split(",")]
    result = asyncio.run(measure(cells, runs))  # type: ignore[arg-type]
    print("RESULT " + json.dumps(result), flush=True)


# ---------------------------------------------------------------- the runner

Samples = dict[str, dict[str, list[float]]]
"""Per metric (``us`` wall, ``cpu_us``), per cell (``store/effect``): one figure per round."""


def run_worker(source: str, cells: list[str], runs: int) -> dict[str, Any]:
    """One fresh interpreter importing daimon from ``source``: its figures."""
    env = {**os.environ, "PYTHONPATH": source, "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, __file__, "--worker", ",".join(cells), "--runs", str(runs)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"worker on {source} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout[done.stdout.rfind("RESULT ") + 7 :])
    if not Path(result["daimon"]).resolve().is_relative_to(Path(source).resolve()):
        raise SystemExit(f"worker meant for {source} imported {result['daimon']}")
    return result


def round_order(jobs: list[str], round_: int) -> list[str]:
    """``ledger`` first, then the two trees, which of them goes first alternating each round (so
    each follows the other, and ``ledger``, equally often over an even number of rounds)."""
    first, *trees = jobs
    return [first, *(trees if round_ % 2 == 0 else trees[::-1])]


def collect(
    jobs: dict[str, tuple[str, list[str]]], rounds: int, runs: int
) -> tuple[dict[str, Samples], dict[str, str], list[float]]:
    """Every job's samples; the stores that could not be measured, why; load averages."""
    samples: dict[str, Samples] = {job: {"us": {}, "cpu_us": {}} for job in jobs}
    missing: dict[str, str] = {}
    loads = []
    for round_ in range(rounds):
        loads.append(round(os.getloadavg()[0], 2))
        for job in round_order(list(jobs), round_):
            source, cells = jobs[job]
            os.sync()  # the last worker's files (and their removal) written out before it starts
            result = run_worker(source, cells, runs)
            missing.update(result["missing"])
            for metric, figures in samples[job].items():
                for cell, value in result[metric].items():
                    figures.setdefault(cell, []).append(value)
    loads.append(round(os.getloadavg()[0], 2))
    return samples, missing, loads


def med(values: list[float]) -> float:
    return statistics.median(values)


def pair(a: list[float], b: list[float]) -> tuple[float, float, str]:
    """Median of a and of b, the median of the rounds' b - a, rounds where b was higher."""
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    return med(a), med(b), f"{med(diffs):+.1f} ({sum(d > 0 for d in diffs)}/{len(diffs)})"


def row(kind: str, a: list[float], b: list[float], ca: list[float], cb: list[float]) -> str:
    wall_a, wall_b, wall_d = pair(a, b)
    cpu_a, cpu_b, cpu_d = pair(ca, cb)
    return (
        f"{kind:8s} {wall_a:9.1f} {wall_b:9.1f} {wall_d:>15s} {wall_b / wall_a:6.3f}x"
        f" | {cpu_a:8.1f} {cpu_b:8.1f} {cpu_d:>14s}"
    )


def header(a: str, b: str) -> str:
    return (
        f"{'store':8s} {a:>9s} {b:>9s} {'added (higher)':>15s} {'ratio':>7s}"
        f" | {'cpu ' + a[:4]:>8s} {'cpu ' + b[:4]:>8s} {'added (higher)':>14s}"
    )


def show_rounds(samples: Samples, label: str = "") -> None:
    for metric, figures in samples.items():
        for cell, values in figures.items():
            rounds = ", ".join(f"{v:.1f}" for v in values)
            print(f"  {label}{metric:6s} {cell:18s} {rounds}")


def ledger_table(samples: Samples, stores: list[str], missing: dict[str, str]) -> None:
    print("The ledger: effect='repeatable' against 'once', µs per run with one tool call")
    print(header("repeatable", "once"))
    wall, cpu = samples["us"], samples["cpu_us"]
    for kind in stores:
        if kind in missing:
            print(f"{kind:8s} {'—':>9s} {'—':>9s}  ({missing[kind]})")
            continue
        a, b = f"{kind}/repeatable", f"{kind}/once"
        note = "  (no checkpoint: no ledger)" if kind == "none" else ""
        print(row(kind, wall[a], wall[b], cpu[a], cpu[b]) + note)


def tree_table(before: Samples, after: Samples, stores: list[str]) -> None:
    print("\neffect='repeatable', the tree before the ledger against after, µs per run")
    print(header("before", "after"))
    for kind in stores:
        cell = f"{kind}/repeatable"
        if cell in before["us"]:
            args = (before["us"][cell], after["us"][cell])
            print(row(kind, *args, before["cpu_us"][cell], after["cpu_us"][cell]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=40, help="runs per checkpointed cell/round")
    parser.add_argument("--stores", default="none,file,redis,postgres")
    parser.add_argument("--before", help="the src directory of the tree before the ledger")
    parser.add_argument("--after", default=str(HERE_SRC), help="the src directory with the ledger")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.runs)
    stores = args.stores.split(",")
    every = [f"{kind}/{effect}" for kind in stores for effect in EFFECTS]
    plain = [f"{kind}/repeatable" for kind in stores if kind != "postgres"]
    jobs = {"ledger": (args.after, every)}
    trees = bool(args.before and plain)
    if trees:
        jobs |= {"before": (args.before, plain), "after": (args.after, plain)}
    samples, missing, loads = collect(jobs, args.rounds, args.runs)
    ledger_table(samples["ledger"], stores, missing)
    if trees:
        tree_table(samples["before"], samples["after"], stores)
    print(
        "\nwall: median of a round's runs; cpu: the process's CPU time per run (every thread),"
        " median of a round's blocks;\nboth the median over rounds. added: median of the rounds'"
        " differences (rounds where it was higher).\nEvery round:"
    )
    for job, figures in samples.items():
        show_rounds(figures, f"{job:6s} ")
    print("load average (1 min), before each round and after the last:", loads)


if __name__ == "__main__":
    main()
