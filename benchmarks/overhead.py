"""Agent-loop overhead: daimon side by side with a plain-asyncio floor, in one run.

Usage: python benchmarks/overhead.py [--rounds N] [--json out.json]

Every (metric, adapter) cell runs in a fresh interpreter; adapters alternate within each round and
the table reports medians over rounds. Metrics: import time; construction time and retained memory
per agent; one run (model -> tool -> model); a new agent plus one run; 1,000 concurrent runs whose
model sleeps 50 ms per call (shared agent); streaming 2,000 text deltas (events/s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
METRICS = (
    "import_ms",
    "construct_us",
    "memory_kib",
    "run_us",
    "new_run_us",
    "concurrent_s",
    "stream_eps",
)
IMPORTS = {"floor": "import asyncio, json", "daimon": "from daimon import Agent, tool"}

CELL = r"""
import sys, time
sys.path.insert(0, {here!r})
metric, name = {metric!r}, {name!r}
if metric == "import_ms":
    t = time.perf_counter(); exec({imp!r}); print((time.perf_counter() - t) * 1e3); raise SystemExit
import asyncio, gc, statistics, tracemalloc
from _adapters import ADAPTERS
A = ADAPTERS[name]

def per_call(fn, n, warm=50):
    for _ in range(warm): fn()
    samples = []
    for _ in range(n):
        t = time.perf_counter_ns(); fn(); samples.append(time.perf_counter_ns() - t)
    return statistics.median(samples) / 1e3

if metric == "construct_us":
    print(per_call(A.build, 5000))
elif metric == "memory_kib":
    A.build(); gc.collect(); tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    agents = [A.build() for _ in range(1000)]
    gc.collect(); after = tracemalloc.get_traced_memory()[0]
    print((after - before) / 1000 / 1024)
elif metric in ("run_us", "new_run_us"):
    async def main():
        agent = A.build()
        for _ in range(100): await A.run(agent)
        samples = []
        for _ in range(3000):
            t = time.perf_counter_ns()
            if metric == "new_run_us":
                text = await A.run(A.build())
            else:
                text = await A.run(agent)
            samples.append(time.perf_counter_ns() - t)
        assert text == "The answer is 5.", text
        return statistics.median(samples) / 1e3
    print(asyncio.run(main()))
elif metric == "concurrent_s":
    async def main():
        agent = A.build(sleepy=True)
        await A.run(agent)
        t = time.perf_counter()
        texts = await asyncio.gather(*(A.run(agent) for _ in range(1000)))
        wall = time.perf_counter() - t
        assert all(x == "The answer is 5." for x in texts)
        return wall
    print(asyncio.run(main()))
elif metric == "stream_eps":
    async def main():
        await A.stream(2000)
        best = []
        for _ in range(20):
            t = time.perf_counter(); n = await A.stream(2000)
            best.append(n / (time.perf_counter() - t))
            assert n == 2000, n
        return statistics.median(best)
    print(asyncio.run(main()))
"""


def cell(metric: str, name: str) -> float:
    code = CELL.format(here=str(HERE), metric=metric, name=name, imp=IMPORTS[name])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{metric}/{name} failed:\n{out.stderr}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = ["floor", "daimon"]
    results: dict[str, dict[str, list[float]]] = {n: {m: [] for m in METRICS} for n in names}
    for round_no in range(args.rounds):
        order = names if round_no % 2 == 0 else names[::-1]
        for metric in METRICS:
            for name in order:
                results[name][metric].append(cell(metric, name))
    medians = {n: {m: statistics.median(v) for m, v in results[n].items()} for n in names}
    header = "| metric | floor | daimon | daimon / floor |"
    print(header)
    print("|---|---:|---:|---:|")
    for metric in METRICS:
        f, d = medians["floor"][metric], medians["daimon"][metric]
        ratio = (f / d) if metric == "stream_eps" else (d / f)
        print(f"| {metric} | {f:,.2f} | {d:,.2f} | {ratio:,.1f}x |")
    if args.json:
        args.json.write_text(
            json.dumps({"rounds": args.rounds, "medians": medians, "raw": results}, indent=2)
        )


if __name__ == "__main__":
    main()
