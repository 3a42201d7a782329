"""Token streaming on Temporal: how long a model's text delta takes to reach a client.

Usage: python benchmarks/temporal_tokens.py [--runs N] [--poll S] [--json out]

Starts Temporal's dev server (the ``temporal`` CLI beside this Python) on free ports, in
memory, and a worker in this process with ``stream_tokens=True``. The model streams
``PIECES`` deltas ``GAP`` seconds apart, each the wall-clock time it was sent; the client reads
``run.stream(tokens=True)`` and, for every stamp it receives, records now - stamp. The same
runs read with ``tokens=False`` show the turn-level figure: a stamp arrives with the recorded
turn, after the model call ended.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _temporal_dev import dev_server, summary

from daimon import Agent, ChatRequest
from daimon.core.events import TextDelta
from daimon.models import FunctionModel
from daimon.temporal import connect, serving, start_run

PIECES = 20
GAP = 0.1


async def _stamps(request: ChatRequest) -> AsyncIterator[str]:
    for index in range(PIECES):
        if index:
            await asyncio.sleep(GAP)
        yield f"{time.time()!r} "


agent = Agent(FunctionModel(stream_function=_stamps), name="stamps")


async def _latencies(client: Any, queue: str, runs: int, poll: float, tokens: bool) -> list[float]:
    latencies = []
    for _ in range(runs):
        run = await start_run(client, agent, "go", task_queue=queue)
        async for event in run.stream(poll=poll, tokens=tokens):
            if isinstance(event, TextDelta):
                now = time.time()
                latencies += [now - float(stamp) for stamp in event.text.split()]
    return latencies


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with dev_server() as server:
        address = server.address
        client = await connect(address)
        queue = f"bench-{uuid.uuid4().hex}"
        results: dict[str, Any] = {"pieces": PIECES, "gap_s": GAP, "poll_s": args.poll}
        async with serving(client, [agent], task_queue=queue, stream_tokens=True):
            await _latencies(client, queue, 2, args.poll, True)  # warm up
            for tokens in (True, False):
                figures = await _latencies(client, queue, args.runs, args.poll, tokens)
                results["tokens" if tokens else "recorded_turns_only"] = summary(figures)
        return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--poll", type=float, default=0.02)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    figures = asyncio.run(main(arguments))
    text = json.dumps(figures, indent=2)
    print(text)
    if arguments.json:
        arguments.json.write_text(text + "\n")
