"""How soon a cancelled run reaches its running tool, and what the heartbeats that carry it cost.

Usage: python benchmarks/temporal_cancel.py [--runs N] [--json out]

Starts Temporal's dev server (as ``temporal_overhead.py`` does) and one worker in this process,
with daimon's default ``ActivityOptions`` and worker settings. Temporal tells an activity it is
cancelled in the answer to a heartbeat, so the figures are the heartbeats':

- cancel latency: ``run.cancel()`` -> the tool's task gets ``CancelledError``, the cancel sent
  0.5, 1.5, 2.5 ... s after the tool started (so every point of the heartbeat cycle is hit);
- heartbeats a minute: the distinct ``last_heartbeat_time`` values the server shows for a tool
  call running 30 s (its pending activity, described every 50 ms);
- a short tool call: p50 (p99) of a run with one tool call that returns at once, which sends no
  heartbeat (the first is due after the heartbeat interval).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _temporal_dev import dev_server, summary

from daimon import Agent, ChatRequest, ChatResponse, RunContext, ToolCall, tool
from daimon.models import FunctionModel
from daimon.temporal import TemporalRun, connect, serving, start_run

started: dict[str, float] = {}
reached: dict[str, float] = {}


@tool
async def wait(ctx: RunContext, seconds: float) -> str:
    """Wait; note when the wait started and when its cancellation reached it."""
    started[ctx.run_id] = time.monotonic()
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        reached[ctx.run_id] = time.monotonic()
        raise
    return "waited"


def _waits(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(last.text)
    seconds = float(last.text)
    return ChatResponse.tool_use(ToolCall(id="w", name="wait", arguments={"seconds": seconds}))


agent = Agent(FunctionModel(_waits), name="waiter", tools=[wait])


async def _tool_started(run: TemporalRun) -> float:
    while run.workflow_id not in started:  # noqa: ASYNC110 - the tool notes it in this process
        await asyncio.sleep(0.01)
    return started[run.workflow_id]


async def _cancel_latency(client: Any, queue: str, runs: int) -> list[float]:
    latencies = []
    for n in range(runs):
        run = await start_run(client, agent, "600", task_queue=queue)
        began = await _tool_started(run)
        await asyncio.sleep(began + 0.5 + n - time.monotonic())
        cancelled = time.monotonic()
        await run.cancel()
        while run.workflow_id not in reached:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        latencies.append(reached[run.workflow_id] - cancelled)
    return latencies


async def _heartbeats_a_minute(client: Any, queue: str, seconds: float = 30.0) -> float:
    run = await start_run(client, agent, str(seconds), task_queue=queue)
    await _tool_started(run)
    seen = set()
    deadline = time.monotonic() + seconds - 1
    while time.monotonic() < deadline:
        described = await run.handle.describe()
        for pending in described.raw_description.pending_activities:
            if pending.HasField("last_heartbeat_time"):
                seen.add(pending.last_heartbeat_time.ToNanoseconds())
        await asyncio.sleep(0.05)
    await run.result()
    return len(seen) * 60 / (seconds - 1)


async def _short_calls(client: Any, queue: str, runs: int) -> list[float]:
    took = []
    for _ in range(runs):
        begin = time.perf_counter()
        run = await start_run(client, agent, "0", task_queue=queue)
        await run.result()
        took.append(time.perf_counter() - begin)
    return took


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with dev_server() as server:
        client = await connect(server.address)
        queue = f"bench-{uuid.uuid4().hex}"
        async with serving(client, [agent], task_queue=queue):
            await _short_calls(client, queue, 5)  # warm up
            latency = await _cancel_latency(client, queue, args.runs)
            return {
                "cancel_latency_s": [round(s, 2) for s in latency],
                "cancel_latency_max_s": round(max(latency), 2),
                "heartbeats_a_minute": round(await _heartbeats_a_minute(client, queue), 1),
                "run_with_a_short_tool_call": summary(await _short_calls(client, queue, 50)),
            }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    figures = asyncio.run(main(arguments))
    text = json.dumps(figures, indent=2)
    print(text)
    if arguments.json:
        arguments.json.write_text(text + "\n")
