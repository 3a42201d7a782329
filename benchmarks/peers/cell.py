"""One measurement (a metric for one framework) in a fresh interpreter; run by ``run.py``.

Usage: <framework's python> cell.py METRIC ADAPTER ["import statements"]

Prints one line ``RESULT {json}`` (after whatever the framework itself prints). Metrics:

- ``import``: milliseconds to run the import statements given on the command line, in an
  interpreter that has imported only os, sys and time (interpreter start-up excluded);
- ``construct``: microseconds per construction of fake model + agent, given the tool the adapter
  wrapped once at module level (median of per-call timings, 2,000 calls after 20 warm-ups);
- ``memory``: KiB retained per agent: tracemalloc over 300 live agents (Python heap) and RSS over
  1,000 (includes C allocations);
- ``run`` / ``new_run``: microseconds per run of a reused agent / of a new agent built and run
  (median of up to 3,000 runs, or what fits in ``BUDGET`` seconds, after 20 warm-ups);
- ``concurrent`` / ``concurrent_per_run``: 1,000 runs at once with a model that sleeps 50 ms per
  call, one shared agent / one agent per run (built before the clock starts): wall seconds, and
  process peak RSS;
- ``stream``: text-delta events per second reaching the caller of a run whose model streams
  2,000 deltas (median over repeated runs).
"""

from __future__ import annotations

import os
import sys
import time

METRIC, ADAPTER = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def rss_kib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024


def emit(**result: object) -> None:
    import json

    print("RESULT " + json.dumps(result), flush=True)


if METRIC == "import":  # the runner sets the offline environment variables
    start = time.perf_counter()
    exec(sys.argv[3])
    elapsed = (time.perf_counter() - start) * 1e3
    emit(import_ms=elapsed, modules=len(sys.modules), rss_mib=rss_kib() / 1024)
    raise SystemExit

import asyncio  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import tracemalloc  # noqa: E402

import common  # noqa: E402

common.go_offline()
A = importlib.import_module(f"adapters.{ADAPTER}")
BLOCKING = getattr(A, "BLOCKING", False)
SHAREABLE = getattr(A, "SHAREABLE", True)
COUNTS = common.COUNTS
BUDGET = float(os.environ.get("BENCH_BUDGET", "8"))
"""Seconds a timed loop may take before it stops early (slow frameworks get fewer samples)."""
N_CONCURRENT = int(os.environ.get("BENCH_CONCURRENT", "1000"))
N_DELTAS = 2000


def check(runs: int, before: dict[str, int]) -> None:
    """Every run made exactly 2 model calls and 1 tool call."""
    model, tool = COUNTS["model"] - before["model"], COUNTS["tool"] - before["tool"]
    if (model, tool) != (2 * runs, runs):
        raise SystemExit(f"{ADAPTER}: {runs} runs made {model} model and {tool} tool calls")


def per_call(fn: object, n: int, warm: int = 20) -> list[float]:
    for _ in range(warm):
        fn()  # type: ignore[operator]
    samples: list[float] = []
    deadline = time.perf_counter() + BUDGET
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter_ns() - t) / 1e3)
        if len(samples) >= 200 and time.perf_counter() > deadline:
            break
    return samples


async def timed_runs(new_agent: bool, n: int = 3000, warm: int = 20) -> list[float]:
    agent = A.build()
    for _ in range(warm):
        await A.run(agent)
    samples: list[float] = []
    before = dict(COUNTS)
    deadline = time.perf_counter() + BUDGET
    text = ""
    for _ in range(n):
        t = time.perf_counter_ns()
        text = await A.run(A.build() if new_agent else agent)
        samples.append((time.perf_counter_ns() - t) / 1e3)
        if len(samples) >= 200 and time.perf_counter() > deadline:
            break
    assert text == common.ANSWER, text
    check(len(samples), before)
    return samples


def timed_runs_blocking(new_agent: bool, n: int = 3000, warm: int = 20) -> list[float]:
    agent = A.build()
    for _ in range(warm):
        A.run(agent)
    samples: list[float] = []
    before = dict(COUNTS)
    deadline = time.perf_counter() + BUDGET
    text = ""
    for _ in range(n):
        t = time.perf_counter_ns()
        text = A.run(A.build() if new_agent else agent)
        samples.append((time.perf_counter_ns() - t) / 1e3)
        if len(samples) >= 200 and time.perf_counter() > deadline:
            break
    assert text == common.ANSWER, text
    check(len(samples), before)
    return samples


async def concurrent(shared: bool) -> dict[str, float]:
    agents = (
        [A.build(sleepy=True)] if shared else [A.build(sleepy=True) for _ in range(N_CONCURRENT)]
    )
    await A.run(A.build(sleepy=True))  # warm the code paths once
    before, base = dict(COUNTS), rss_kib()
    start = time.perf_counter()
    if shared:
        texts = await asyncio.gather(*(A.run(agents[0]) for _ in range(N_CONCURRENT)))
    else:
        texts = await asyncio.gather(*(A.run(agent) for agent in agents))
    wall = time.perf_counter() - start
    assert all(t == common.ANSWER for t in texts), set(texts)
    check(N_CONCURRENT, before)
    return _concurrency_result(wall, base)


def concurrent_threads() -> dict[str, float]:
    agents = [A.build(sleepy=True) for _ in range(N_CONCURRENT)]
    A.run(A.build(sleepy=True))
    texts: list[str] = []
    threads = [threading.Thread(target=lambda a=a: texts.append(A.run(a))) for a in agents]
    before, base = dict(COUNTS), rss_kib()
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    assert len(texts) == N_CONCURRENT and all(t == common.ANSWER for t in texts), set(texts)
    check(N_CONCURRENT, before)
    return _concurrency_result(wall, base)


def _concurrency_result(wall: float, base_kib: float) -> dict[str, float]:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "wall_s": wall,
        "runs_per_s": N_CONCURRENT / wall,
        "peak_rss_mib": peak / 1024,
        "rss_before_mib": base_kib / 1024,
        "kib_per_run": max(peak - base_kib, 0.0) / N_CONCURRENT,
    }


async def streamed() -> float:
    rates: list[float] = []
    await A.stream(N_DELTAS)
    deadline = time.perf_counter() + BUDGET
    for _ in range(20):
        t = time.perf_counter()
        n = await A.stream(N_DELTAS)
        rates.append(n / (time.perf_counter() - t))
        assert n == N_DELTAS, n
        if len(rates) >= 3 and time.perf_counter() > deadline:
            break
    return statistics.median(rates)


def streamed_blocking() -> float:
    rates: list[float] = []
    A.stream(N_DELTAS)
    deadline = time.perf_counter() + BUDGET
    for _ in range(20):
        t = time.perf_counter()
        n = A.stream(N_DELTAS)
        rates.append(n / (time.perf_counter() - t))
        assert n == N_DELTAS, n
        if len(rates) >= 3 and time.perf_counter() > deadline:
            break
    return statistics.median(rates)


def memory() -> dict[str, float]:
    keep = [A.build() for _ in range(10)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    keep = [A.build() for _ in range(300)]
    gc.collect()
    traced = (tracemalloc.get_traced_memory()[0] - before) / 300 / 1024
    tracemalloc.stop()
    del keep
    gc.collect()
    base = rss_kib()
    keep = [A.build() for _ in range(1000)]
    gc.collect()
    rss = (rss_kib() - base) / 1000
    del keep
    return {"tracemalloc_kib": traced, "rss_kib": rss}


def main() -> None:
    if METRIC == "construct":
        samples = per_call(A.build, 2000)
        emit(construct_us=statistics.median(samples), mean_us=statistics.fmean(samples))
    elif METRIC == "memory":
        emit(**memory())
    elif METRIC in ("run", "new_run"):
        new = METRIC == "new_run"
        samples = timed_runs_blocking(new) if BLOCKING else asyncio.run(timed_runs(new))
        emit(**{f"{METRIC}_us": statistics.median(samples), "samples": len(samples)})
    elif METRIC in ("concurrent", "concurrent_per_run"):
        if BLOCKING:
            result = concurrent_threads()
        else:
            result = asyncio.run(concurrent(shared=METRIC == "concurrent" and SHAREABLE))
        emit(**result)
    elif METRIC == "stream":
        emit(events_per_s=streamed_blocking() if BLOCKING else asyncio.run(streamed()))
    else:
        raise SystemExit(f"unknown metric {METRIC!r}")
    if common.ATTEMPTS:
        raise SystemExit(f"network connections attempted: {common.ATTEMPTS}")


main()
