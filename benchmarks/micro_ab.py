"""In-process, interleaved A/B of the loop's micro-optimisations against the plain code.

Usage (from the repository root; ``PYTHONPATH=src`` to measure a worktree's sources):

    .venv/bin/python benchmarks/micro_ab.py [--blocks 300] [--runs 200] [--tool async]

Each comparison swaps one piece of code in place, inside one interpreter, and alternates the two
versions block by block (``--runs`` runs of the ``run`` cell's ReAct task, ``benchmarks/peers``,
per block; the order flips every block), so load on a shared machine hits both alike. It prints,
for each, the median of the per-block differences (plain minus optimised; a block's figure is the
median of its runs) and their quartiles: a difference whose quartiles straddle zero is noise.

- ``fast_new``: the four ``fast_new`` makers of the run path against calling the classes, all
  together and one at a time;
- ``detach``: the cancel token's detach with ``try``/``except`` against ``contextlib.suppress``;
- ``TextDelta``: a streamed run whose model builds a ``TextDelta`` per delta, with the class's
  ``fast_init`` ``__init__`` against the one ``dataclasses`` writes (µs per delta).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

Swap = Callable[[bool], None]  # True: the optimised version; False: the plain one


async def compare(name: str, swap: Swap, block: Callable[[], Awaitable[float]], n: int) -> None:
    diffs = []
    for i in range(n):
        got = {}
        for optimised in (True, False) if i % 2 == 0 else (False, True):
            swap(optimised)
            got[optimised] = await block()
        diffs.append(got[False] - got[True])
    swap(True)
    low, mid, high = statistics.quantiles(diffs, n=4)
    print(f"{name:32s} plain - optimised: {mid:+.2f} µs (quartiles {low:+.2f}, {high:+.2f})")


def fast_new_swaps() -> dict[str, Swap]:
    import daimon.agent._run as run
    import daimon.agent._tool_turn as tool_turn
    import daimon.core.chat as chat

    sites = [
        (run, "_new_request", chat.ChatRequest),
        (run, "_new_response", run.AgentResponse),
        (tool_turn, "_new_message", tool_turn.Message),
        (chat, "_new_usage", chat.Usage),
    ]
    made = {(module, name): getattr(module, name) for module, name, _ in sites}

    def swap_of(chosen: list[tuple[Any, str, type]]) -> Swap:
        def swap(optimised: bool) -> None:
            for module, name, cls in chosen:
                setattr(module, name, made[(module, name)] if optimised else cls)

        return swap

    swaps = {"fast_new, all four": swap_of(sites)}
    swaps.update({f"fast_new, {name}": swap_of([(m, name, c)]) for m, name, c in sites})
    return swaps


def detach_swap() -> Swap:
    from daimon.core.cancel import CancelToken

    optimised_on_cancel = CancelToken.on_cancel

    def plain_on_cancel(self: CancelToken, callback: Callable[[], object]) -> Callable[[], None]:
        if self.cancelled:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def detach() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return detach

    def swap(optimised: bool) -> None:
        CancelToken.on_cancel = optimised_on_cancel if optimised else plain_on_cancel  # type: ignore[method-assign]

    return swap


async def text_delta(blocks: int) -> None:
    from daimon import Agent
    from daimon.core.events import TextDelta
    from daimon.models import FunctionModel

    fields = [
        (f.name, f.type, dataclasses.field(default=f.default, init=f.init, kw_only=True))
        for f in dataclasses.fields(TextDelta)
    ]
    plain = dataclasses.make_dataclass("TextDelta", fields, frozen=True, slots=True).__init__
    optimised, deltas = TextDelta.__init__, 5000

    async def stream(request: Any) -> Any:
        for _ in range(deltas):
            yield TextDelta(text="x")

    agent = Agent(FunctionModel(stream_function=stream))

    async def block() -> float:
        start = time.perf_counter()
        async for _ in agent.prompt_stream("go"):
            pass
        return (time.perf_counter() - start) / deltas * 1e6

    def swap(use: bool) -> None:
        TextDelta.__init__ = optimised if use else plain  # type: ignore[method-assign]

    await compare("TextDelta fast_init (per delta)", swap, block, blocks)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=300)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tool", default="async", choices=("sync", "async"))
    args = parser.parse_args()
    os.environ["BENCH_TOOL"] = args.tool
    from adapters import daimon as adapter

    agent = adapter.build()
    for _ in range(200):
        await adapter.run(agent)

    async def block() -> float:
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            await adapter.run(agent)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e6

    print(f"µs per run ({args.tool} tool); load average {os.getloadavg()[0]:.1f}")
    for name, swap in fast_new_swaps().items():
        await compare(name, swap, block, args.blocks)
    await compare("detach: try/except", detach_swap(), block, args.blocks)
    await text_delta(args.blocks)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
