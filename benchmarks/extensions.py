"""What extensions cost: one ReAct run and a stream, with none and with pass-through ones.

Usage (from the repository root): ``PYTHONPATH=src python benchmarks/extensions.py [--rounds 5]``

Each round times, in turn, an agent with no extension (the direct path), with one pass-through
extension (both methods overridden) and with three; the run cell is µs per ReAct run (model →
async ``add`` → model), the stream cell µs per streamed event (1,000 text deltas per run).
Prints each cell's median over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import daimon
from daimon import CallModel, CallTool, ChatRequest, ChatResponse, Extension, RunState, ToolCall
from daimon.models import FunctionModel


class PassThrough(Extension):
    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunState, call_next: CallModel
    ) -> ChatResponse:
        return await call_next(request)

    async def wrap_tool_call(
        self, call: ToolCall, ctx: RunState, call_next: CallTool
    ) -> daimon.ToolOutput:
        return await call_next(call)


@daimon.tool
async def add(a: int, b: int) -> int:
    """Add."""
    return a + b


_TOOL_TURN = ChatResponse.tool_use(ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}))


def respond(request: ChatRequest) -> ChatResponse:
    if request.messages[-1].role is daimon.Role.TOOL:
        return ChatResponse.reply("5")
    return _TOOL_TURN


async def run_us(extensions: int, n: int = 2000) -> float:
    agent = daimon.Agent(
        FunctionModel(respond), tools=[add], extensions=[PassThrough() for _ in range(extensions)]
    )
    for _ in range(50):
        await agent.prompt("2 + 3?")
    start = time.perf_counter()
    for _ in range(n):
        await agent.prompt("2 + 3?")
    return (time.perf_counter() - start) / n * 1e6


async def stream_us(extensions: int, events: int = 1000, runs: int = 20) -> float:
    delta = daimon.TextDelta(text="x")

    async def deltas(request: Any) -> Any:
        for _ in range(events):
            yield delta

    agent = daimon.Agent(
        FunctionModel(stream_function=deltas),
        extensions=[PassThrough() for _ in range(extensions)],
    )
    start = time.perf_counter()
    for _ in range(runs):
        async for _event in agent.prompt_stream("go"):
            pass
    return (time.perf_counter() - start) / (runs * events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cells = [(kind, n) for kind in ("run", "stream") for n in (0, 1, 3)]
    results: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
    for _ in range(args.rounds):
        for kind, n in cells:
            measure = run_us if kind == "run" else stream_us
            results[(kind, n)].append(asyncio.run(measure(n)))
    for (kind, n), samples in results.items():
        unit = "µs per run" if kind == "run" else "µs per event"
        print(f"{kind:6s} {n} extension(s): {statistics.median(samples):8.2f} {unit}")


if __name__ == "__main__":
    main()
