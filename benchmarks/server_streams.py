"""Streams across replicas: what the state store adds to a streamed request, and open streams.

Usage: python benchmarks/server_streams.py [--rounds 3] [--requests 300] [--duration 6]
       [--streams 1000] [--only latency,open,replicas,workers]

latency   POST /prompt/stream (a fake model streaming 5 deltas, no tool) on a bare FastAPI SSE
          endpoint doing the same work, and on ``daimon serve`` keeping its streams in memory,
          in Redis and in PostgreSQL (the services on this machine). One client at a time for
          p50/p99 (the added latency), then ``--connections`` at once for req/s. Rounds
          alternate the servers; the table gives the median of the rounds.
open      ``--streams`` concurrent streams held open on one replica (their runs wait), the
          server's resident memory before and with them, and ``/health`` latency meanwhile.
replicas  req/s of one replica against two sharing a Redis store (the client alternates
          between them), on this machine's cores.
workers   p50/p99 of the same stream run in the replica (PostgreSQL store) and run on a
          ``daimon worker`` process (a Redis broker, the same store): what a worker adds.

Every server is one uvicorn process on 127.0.0.1, started by this script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

HERE = Path(__file__).resolve()
BODY = {"input": "stream please"}
DELTAS = 5
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
POSTGRES = os.environ.get("BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
STORES = {"memory": None, "redis": REDIS, "postgres": POSTGRES}
KINDS = {
    "bare": "bare FastAPI SSE (same deltas)",
    "memory": "daimon serve, memory store",
    "redis": "daimon serve --store redis://",
    "postgres": "daimon serve --store postgresql://",
}
ROLES = (*KINDS, "on-workers", "worker")
"""What ``--serve`` may start: a server of KINDS, one sending runs to workers, or a worker."""


# ------------------------------------------------------------------------------ the servers


async def deltas(request: Any) -> AsyncIterator[str]:
    """The fake model: five text deltas (or, for the open-streams run, one and then a wait)."""
    if os.environ.get("BENCH_HOLD"):
        yield "waiting "
        await asyncio.sleep(3600)
    for index in range(DELTAS):
        yield f"d{index} "


def streamer() -> Any:
    from daimon import Agent
    from daimon.models import FunctionModel

    return Agent(FunctionModel(stream_function=deltas), name="streamer")


def daimon_app(store: str | None, port: int, **settings: Any) -> Any:
    from daimon.server import ServerSettings, create_app

    return create_app(streamer(), settings=ServerSettings(port=port, store=store, **settings))


class Prompt(BaseModel):
    input: str


def bare_app() -> Any:
    from fastapi import FastAPI
    from starlette.responses import StreamingResponse

    app = FastAPI()

    @app.post("/prompt/stream")
    async def stream(body: Prompt) -> StreamingResponse:
        async def frames() -> AsyncIterator[bytes]:
            text = ""
            async for delta in deltas(body):
                text += delta
                data = json.dumps({"text": delta, "kind": "text_delta"})
                yield f"event: text_delta\ndata: {data}\n\n".encode()
            done = json.dumps({"kind": "done", "response": {"text": text}})
            yield f"event: done\ndata: {done}\n\n".encode()

        return StreamingResponse(frames(), media_type="text/event-stream")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def serve(kind: str, port: int) -> None:
    import uvicorn

    if kind == "worker":
        from daimon.distributed import run_worker

        queue = os.environ["BENCH_QUEUE"]
        asyncio.run(run_worker(streamer(), REDIS, state_store=POSTGRES, queue=queue, poll=1.0))
        return
    if kind == "on-workers":
        app = daimon_app(POSTGRES, port, broker=REDIS, queue=os.environ["BENCH_QUEUE"])
    else:
        app = bare_app() if kind == "bare" else daimon_app(STORES[kind], port)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ------------------------------------------------------------------------------ the load


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(kind: str, **env: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(HERE), "--serve", kind, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    if kind == "worker":
        return process, port  # it listens on nothing
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"the {kind} server did not start") from None
            time.sleep(0.05)


async def one_stream(client: Any, url: str) -> float:
    """Seconds for one whole stream; checks that it ended with ``done``."""
    started = time.perf_counter()
    last = b""
    async with client.stream("POST", url, json=BODY) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {await response.aread()!r}")
        async for chunk in response.aiter_bytes():
            last = chunk
    if b"event: done" not in last:
        raise RuntimeError(f"the stream did not end with done: {last[-200:]!r}")
    return time.perf_counter() - started


async def latency(ports: list[int], requests: int) -> dict[str, float]:
    import httpx

    async with httpx.AsyncClient(timeout=30) as client:
        for port in ports:  # warm-up (and the store's tables, on the first request)
            await one_stream(client, f"http://127.0.0.1:{port}/prompt/stream")
        seconds = [
            await one_stream(client, f"http://127.0.0.1:{ports[i % len(ports)]}/prompt/stream")
            for i in range(requests)
        ]
    seconds.sort()
    return {
        "p50_ms": seconds[len(seconds) // 2] * 1e3,
        "p99_ms": seconds[int(len(seconds) * 0.99)] * 1e3,
    }


async def throughput(ports: list[int], connections: int, duration: float) -> float:
    import httpx

    limits = httpx.Limits(max_connections=connections * 2, max_keepalive_connections=connections)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        done = 0
        stop = time.perf_counter() + duration

        async def worker(index: int) -> None:
            nonlocal done
            url = f"http://127.0.0.1:{ports[index % len(ports)]}/prompt/stream"
            while time.perf_counter() < stop:
                await one_stream(client, url)
                done += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(connections)))
        return done / (time.perf_counter() - began)


def measure(kind: str, args: argparse.Namespace) -> dict[str, float]:
    process, port = start(kind)
    try:
        row = asyncio.run(latency([port], args.requests))
        row["rps"] = asyncio.run(throughput([port], args.connections, args.duration))
        return row
    finally:
        process.terminate()
        process.wait(timeout=15)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def hold_open(port: int, streams: int, pid: int) -> dict[str, float]:
    import httpx

    url = f"http://127.0.0.1:{port}/prompt/stream"
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await client.get(f"http://127.0.0.1:{port}/health")
        before = rss_kib(pid)
        opened = asyncio.Event()
        count = 0

        async def reader() -> None:
            nonlocal count
            async with client.stream("POST", url, json=BODY) as response:
                async for chunk in response.aiter_bytes():
                    if b"waiting" in chunk:
                        count += 1
                        if count == streams:
                            opened.set()
                        await asyncio.sleep(3600)

        began = time.perf_counter()
        tasks = [asyncio.create_task(reader()) for _ in range(streams)]
        await asyncio.wait_for(opened.wait(), 120)
        open_s = time.perf_counter() - began
        await asyncio.sleep(2.0)
        during = rss_kib(pid)
        health = []
        for _ in range(20):
            started = time.perf_counter()
            (await client.get(f"http://127.0.0.1:{port}/health")).raise_for_status()
            health.append(time.perf_counter() - started)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "streams": streams,
        "open_s": open_s,
        "rss_before_mib": before / 1024,
        "rss_open_mib": during / 1024,
        "kib_per_stream": (during - before) / streams,
        "health_p50_ms": statistics.median(health) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="sequential, per round")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--only", default="latency,open,replicas,workers")
    parser.add_argument("--serve", choices=ROLES, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    parts = set(args.only.split(","))
    if "latency" in parts:
        results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
        for _ in range(args.rounds):
            for kind in KINDS:
                results[kind].append(measure(kind, args))
        table = {
            kind: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            for kind, runs in results.items()
        }
        print(
            f"POST /prompt/stream ({DELTAS} deltas + done): p50/p99 one at a time "
            f"({args.requests} requests), req/s with {args.connections} at once "
            f"({args.duration:g} s); median of {args.rounds} interleaved rounds"
        )
        print(f"{'server':<38}{'p50 ms':>9}{'added':>9}{'p99 ms':>9}{'req/s':>9}{'ratio':>8}")
        bare = table["bare"]
        for kind, label in KINDS.items():
            row = table[kind]
            added = row["p50_ms"] - bare["p50_ms"]
            print(
                f"{label:<38}{row['p50_ms']:>9.2f}{added:>+9.2f}{row['p99_ms']:>9.2f}"
                f"{row['rps']:>9.0f}{row['rps'] / bare['rps']:>7.2f}x"
            )
    if "open" in parts:
        process, port = start("memory", BENCH_HOLD="1")
        try:
            row = asyncio.run(hold_open(port, args.streams, process.pid))
        finally:
            process.kill()  # its runs wait an hour: a graceful stop would drain them first
            process.wait(timeout=30)
        print(
            f"{row['streams']} open streams on one replica (memory store): opened in "
            f"{row['open_s']:.1f} s; RSS {row['rss_before_mib']:.0f} -> "
            f"{row['rss_open_mib']:.0f} MiB ({row['kib_per_stream']:.1f} KiB per open stream "
            f"with its waiting run); GET /health p50 meanwhile {row['health_p50_ms']:.1f} ms"
        )
    if "replicas" in parts:
        rates: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.rounds):
            for count in (1, 2):
                started = [start("redis") for _ in range(count)]
                try:
                    ports = [port for _, port in started]
                    asyncio.run(latency(ports, 10))
                    rates[count].append(
                        asyncio.run(throughput(ports, args.connections, args.duration))
                    )
                finally:
                    for process, _ in started:
                        process.terminate()
                        process.wait(timeout=15)
        one, two = statistics.median(rates[1]), statistics.median(rates[2])
        print(
            f"replicas sharing Redis, {args.connections} streams at once, {os.cpu_count()} cores: "
            f"one {one:.0f} req/s, two {two:.0f} req/s ({two / one:.2f}x)"
        )
    if "workers" in parts:
        print(on_workers(args))


def on_workers(args: argparse.Namespace) -> str:
    """The stream in the replica against on a worker, rounds interleaved; the line to print."""
    queue = f"bench-{os.getpid()}"
    worker, _ = start("worker", BENCH_QUEUE=queue)
    rows: dict[str, list[dict[str, float]]] = {"postgres": [], "on-workers": []}
    try:
        for _ in range(args.rounds):
            for kind in rows:
                process, port = start(kind, BENCH_QUEUE=queue)
                try:
                    rows[kind].append(asyncio.run(latency([port], args.requests)))
                finally:
                    process.terminate()
                    process.wait(timeout=15)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    here, there = (
        {key: statistics.median(r[key] for r in rows[kind]) for key in ("p50_ms", "p99_ms")}
        for kind in rows
    )
    return (
        f"POST /prompt/stream, PostgreSQL store, one at a time ({args.requests} requests, median "
        f"of {args.rounds} rounds): run in the replica p50 {here['p50_ms']:.2f} ms (p99 "
        f"{here['p99_ms']:.2f}); on a worker through a Redis broker p50 {there['p50_ms']:.2f} ms "
        f"(p99 {there['p99_ms']:.2f}), {there['p50_ms'] - here['p50_ms']:+.2f} ms"
    )


if __name__ == "__main__":
    main()
