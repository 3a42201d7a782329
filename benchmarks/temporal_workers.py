"""Runs/s of daimon agents on Temporal with 1, 2 and 4 worker processes.

Usage: python benchmarks/temporal_workers.py [--runs N] [--workers 1 2 4] [--json out]

Starts Temporal's dev server (the ``temporal`` CLI beside this Python) on free ports, in
memory, then for each worker count: that many worker processes (this script with ``--serve``)
on a fresh task queue, and ``--runs`` runs started at once by this process, each a run with
one tool call (three activities: model, tool, model; a FunctionModel that answers at once, so
the figure is the framework's and the service's). runs/s = runs / (first start -> last answer).
Everything shares one machine: the dev server, the client and the workers compete for its
cores, so more workers than cores measure contention as much as scaling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _temporal_dev import dev_server

from daimon import Agent, ChatRequest, ChatResponse, ToolCall, tool
from daimon.models import FunctionModel
from daimon.temporal import connect, serving, start_run


@tool
def stamp() -> str:
    """The time now."""
    return repr(time.time())


def _model(request: ChatRequest) -> ChatResponse:
    """One ``stamp`` call, then the answer."""
    if request.messages[-1].role.value == "tool":
        return ChatResponse.reply("done")
    return ChatResponse.tool_use(ToolCall(id="c0", name="stamp", arguments={}))


agent = Agent(FunctionModel(_model), name="bench", tools=[stamp])


async def _serve(address: str, queue: str) -> None:
    """A worker process: serve the agent until killed."""
    client = await connect(address)
    async with serving(client, [agent], task_queue=queue):
        print("ready", flush=True)
        await asyncio.Event().wait()


def _workers(address: str, queue: str, count: int) -> list[subprocess.Popen[str]]:
    command = [sys.executable, __file__, "--serve", address, queue]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(count)]
    for process in processes:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise SystemExit("a worker did not start")
    return processes


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far (Linux: /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _runs_per_second(client: Any, queue: str, runs: int) -> float:
    start = time.perf_counter()
    started = await asyncio.gather(
        *(start_run(client, agent, "go", task_queue=queue) for _ in range(runs))
    )
    await asyncio.gather(*(run.result() for run in started))
    return runs / (time.perf_counter() - start)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with dev_server() as server:
        address = server.address
        client = await connect(address)
        results: dict[str, Any] = {"cpus": os.cpu_count(), "runs": args.runs}
        for count in args.workers:
            queue = f"bench-{uuid.uuid4().hex}"
            processes = _workers(address, queue, count)
            try:
                await _runs_per_second(client, queue, 20)  # warm up every worker
                pids = [server.pid, *(p.pid for p in processes)]
                before = [_cpu_seconds(pid) for pid in pids]
                wall, client_cpu = time.perf_counter(), time.process_time()
                rate = await _runs_per_second(client, queue, args.runs)
                wall = time.perf_counter() - wall
                client_cpu = time.process_time() - client_cpu
                used = [_cpu_seconds(pid) - was for pid, was in zip(pids, before, strict=True)]
                results[f"{count}_workers"] = {
                    "runs_per_s": rate,
                    "server_cpu_share": used[0] / wall,  # 1.0: one core busy all the time
                    "workers_cpu_share": sum(used[1:]) / wall,
                    "client_cpu_share": client_cpu / wall,
                    "load_average_1min": os.getloadavg()[0],
                }
            finally:
                for process in processes:
                    process.send_signal(signal.SIGKILL)
                    process.wait()
        return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--serve", nargs=2, metavar=("ADDRESS", "QUEUE"), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    if arguments.serve:
        asyncio.run(_serve(*arguments.serve))
        raise SystemExit(0)
    figures = asyncio.run(main(arguments))
    text = json.dumps(figures, indent=2)
    print(text)
    if arguments.json:
        arguments.json.write_text(text + "\n")
