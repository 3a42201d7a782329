"""What a sync tool costs: the ways to run a plain ``def`` off (or on) the event loop, side by side.

Usage (from the repository root):

    .venv/bin/python benchmarks/sync_tools.py [--rounds 7] [--calls 2000] [--runs 2000]

Three tables, each the median over rounds of per-round medians, every option measured once per
round in an order that rotates each round (so load spreads over all of them):

- **hop**: µs per ``await`` of one call of a trivial function (``add(2, 3)``) through each
  mechanism: inline, ``asyncio.to_thread``, ``run_in_executor`` on a dedicated one-thread pool,
  daimon's tool threads (woken on the loop's core, and on the kernel's choice of core);
- **run**: µs per daimon ReAct run (model -> ``add`` -> model, the ``run`` cell of
  ``benchmarks/peers``) with the tool as ``async def``, as ``def`` through each mechanism
  (``to_thread`` is what daimon did before), and with an adaptive prototype that goes inline
  after 20 fast calls; plus the plain-asyncio floor with a sync tool;
- **batch**: µs per turn of four sync calls: four concurrent hops, or one hop running all four.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import daimon
from daimon.models import FunctionModel
from daimon.tools import FunctionTool
from daimon.tools._threads import ToolThreads, run_in_thread

sys.path.insert(0, str(Path(__file__).parent / "peers"))
os.environ["BENCH_TOOL"] = "sync"  # the floor's tool: a plain def, called inline
from adapters import floor  # type: ignore[import-not-found]

_DEDICATED = ThreadPoolExecutor(1, thread_name_prefix="bench-dedicated")
_UNPLACED = ToolThreads(wake_on_loop_core=False)  # daimon's pool, the kernel choosing the core


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# ------------------------------------------------------------------ hops


def _dedicated(function: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    context = contextvars.copy_context()  # what to_thread does, for a fair comparison
    return asyncio.get_running_loop().run_in_executor(_DEDICATED, context.run, function, *args)


async def _inline(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)


def _pool(function: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    return run_in_thread(function, args, {})


def _unplaced(function: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    return _UNPLACED.submit(function, args, {})


async def _time_hop(hop: Callable[..., Awaitable[Any]], calls: int) -> float:
    for _ in range(50):
        await hop(add, 2, 3)
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        await hop(add, 2, 3)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e3


# ------------------------------------------------------------------ runs


class _ToThreadTool(FunctionTool[Any, Any]):
    """daimon's sync tools before: ``asyncio.to_thread``."""

    async def _run_sync(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await asyncio.to_thread(self._call, *args, **kwargs)


class _DedicatedTool(FunctionTool[Any, Any]):
    """A warm dedicated executor (one thread, always the same)."""

    async def _run_sync(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await _dedicated(functools.partial(self._call, *args, **kwargs))


class _UnplacedTool(FunctionTool[Any, Any]):
    """daimon's tool threads without waking the worker on the loop's core (before session 8)."""

    async def _run_sync(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await _UNPLACED.submit(self._call, args, kwargs)


class _AdaptiveTool(FunctionTool[Any, Any]):
    """A prototype, not daimon's: threaded until 20 calls in a row took under 100 µs, then inline.

    It cannot keep the promise that a slow tool never blocks the loop: a call that is slow after
    the switch (a cache miss, a network call) blocks it, and is only noticed afterwards.
    """

    fast = 0

    async def _run_sync(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if type(self).fast >= 20:
            result, took = _timed(self._call, *args, **kwargs)
        else:
            result, took = await run_in_thread(_timed, (self._call, *args), kwargs)
        type(self).fast = type(self).fast + 1 if took < 100e-6 else 0
        return result


def _timed(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    return function(*args, **kwargs), time.perf_counter() - start


_CALL = daimon.ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3})


def _respond(request: daimon.ChatRequest) -> daimon.ChatResponse:
    last = request.messages[-1]
    if last.role is daimon.Role.TOOL:
        return daimon.ChatResponse.reply(f"The answer is {last.content}.")
    return daimon.ChatResponse.tool_use(_CALL)


def _agents() -> dict[str, Callable[[], Awaitable[str]]]:
    tools: dict[str, Any] = {
        "async def": FunctionTool(add_async, name="add"),
        "def, daimon's tool threads (default)": FunctionTool(add, name="add"),
        "def, tool threads, the kernel's choice of core": _UnplacedTool(add, name="add"),
        "def, inline=True": FunctionTool(add, name="add", inline=True),
        "def, asyncio.to_thread (before)": _ToThreadTool(add, name="add"),
        "def, dedicated 1-thread executor": _DedicatedTool(add, name="add"),
        "def, adaptive prototype": _AdaptiveTool(add, name="add"),
    }
    runs: dict[str, Callable[[], Awaitable[str]]] = {}
    for label, made in tools.items():
        agent = daimon.Agent(FunctionModel(_respond), tools=[made])
        runs[label] = _prompt(agent)
    floor_agent = floor.build()
    runs["floor (plain asyncio, def called inline)"] = lambda: floor.run(floor_agent)
    return runs


def _prompt(agent: daimon.Agent) -> Callable[[], Awaitable[str]]:
    async def run() -> str:
        return (await agent.prompt("What is 2 + 3?")).text

    return run


async def _time_run(run: Callable[[], Awaitable[str]], runs: int) -> float:
    for _ in range(20):
        await run()
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        text = await run()
        samples.append(time.perf_counter_ns() - start)
    assert text == "The answer is 5.", text
    return statistics.median(samples) / 1e3


# ------------------------------------------------------------------ batches


def _four() -> list[int]:
    return [add(2, 3) for _ in range(4)]


async def _four_hops() -> Any:
    return await asyncio.gather(*(run_in_thread(add, (2, 3), {}) for _ in range(4)))


async def _one_hop() -> Any:
    return await run_in_thread(_four, (), {})


async def _time_batch(batch: Callable[[], Awaitable[Any]], calls: int) -> float:
    for _ in range(50):
        await batch()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        await batch()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e3


# ------------------------------------------------------------------ driver


def _rotated(items: list[Any], round_: int) -> list[Any]:
    shift = round_ % len(items)
    return items[shift:] + items[:shift]


def _table(title: str, unit: str, results: dict[str, list[float]], base: str | None) -> None:
    print(f"\n{title}\n")
    print(f"| option | {unit} | ratio to {base} |" if base else f"| option | {unit} |")
    print("|---|---:|---:|" if base else "|---|---:|")
    reference = statistics.median(results[base]) if base else 0.0
    for label, samples in results.items():
        value = statistics.median(samples)
        ratio = f" {value / reference:.2f}x |" if base else ""
        print(f"| {label} | {value:,.1f} |{ratio}")


async def _main(rounds: int, calls: int, runs: int) -> None:
    hops: dict[str, Callable[..., Awaitable[Any]]] = {
        "inline (on the loop's thread)": _inline,
        "asyncio.to_thread": asyncio.to_thread,
        "run_in_executor, dedicated 1-thread pool": _dedicated,
        "daimon's tool threads": _pool,
        "daimon's tool threads, the kernel's choice of core": _unplaced,
    }
    agents = _agents()
    batches = {"4 sync calls, 4 hops": _four_hops, "4 sync calls, 1 hop": _one_hop}
    hop_us: dict[str, list[float]] = {label: [] for label in hops}
    run_us: dict[str, list[float]] = {label: [] for label in agents}
    batch_us: dict[str, list[float]] = {label: [] for label in batches}
    loads = [os.getloadavg()]
    for round_ in range(rounds):
        for label in _rotated(list(hops), round_):
            hop_us[label].append(await _time_hop(hops[label], calls))
        for label in _rotated(list(agents), round_):
            run_us[label].append(await _time_run(agents[label], runs))
        for label in _rotated(list(batches), round_):
            batch_us[label].append(await _time_batch(batches[label], calls))
        loads.append(os.getloadavg())
    _table("Hop: one call of add(2, 3)", "µs per call", hop_us, None)
    _table("Run: one ReAct run, model -> add -> model", "µs per run", run_us, "async def")
    _table("Batch: one turn's four sync calls", "µs per turn", batch_us, None)
    print(f"\nload average (1, 5, 15 min) before and after each round: {loads}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000, help="timed hops per option and round")
    parser.add_argument("--runs", type=int, default=2000, help="timed runs per option and round")
    args = parser.parse_args()
    asyncio.run(_main(args.rounds, args.calls, args.runs))


if __name__ == "__main__":
    main()
