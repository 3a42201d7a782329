"""Server throughput: daimon's POST /prompt against a bare FastAPI endpoint doing the same work.

Usage: python benchmarks/server.py [--connections 64] [--duration 10] [--rounds 2] [--json out.json]

Each server runs one uvicorn worker in a subprocess on 127.0.0.1 and answers the same request:
a fake model (one Python function) asks for a tool call, the tool runs, the model answers.
``bare`` calls the model function twice and the tool directly in a FastAPI endpoint; ``agent``
is a FastAPI endpoint awaiting ``agent.prompt()`` (the agent loop, no daimon.server); ``daimon``
is ``daimon.server`` (agent loop, security gates, disconnect watching, the request timeout).
The load comes from ``wrk`` when it is installed (``apt-get install -y wrk``), else from a small
asyncio client, with ``--connections`` concurrent keep-alive connections. Rounds alternate the
servers; the table reports the median of the rounds, and the CPU time the server process used
per request (from /proc), which other load on the machine disturbs less than requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

HERE = Path(__file__).resolve()
BODY = {"input": "What is 2 + 3?"}
KINDS = {
    "bare": "bare FastAPI (model, tool)",
    "agent": "FastAPI + agent.prompt()",
    "daimon": "daimon.server",
}
ANSWER = "The answer is 5."


# ------------------------------------------------------------------------------ the servers


def model(request: Any) -> Any:
    """The fake LLM both servers use: ask for add(2, 3), then answer with its result."""
    from daimon import ChatResponse, Role, ToolCall

    last = request.messages[-1]
    if last.role is Role.TOOL:
        return ChatResponse.reply(f"The answer is {last.text}.")
    return ChatResponse.tool_use(ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}))


async def add(a: int, b: int) -> int:
    """Add two numbers (async: a sync tool would add a worker-thread hop to daimon's side)."""
    return a + b


def agent() -> Any:
    from daimon import Agent, tool
    from daimon.models import FunctionModel

    return Agent(FunctionModel(model), name="calc", tools=[tool(add)])


def daimon_app(port: int) -> Any:
    from daimon.server import ServerSettings, create_app

    return create_app(agent(), settings=ServerSettings(port=port))


def agent_app(port: int) -> Any:
    """A bare FastAPI endpoint that runs the agent itself: the agent loop without daimon.server."""
    from fastapi import FastAPI

    calc = agent()
    app = FastAPI()

    @app.post("/prompt")
    async def prompt(body: Prompt) -> dict[str, Any]:
        response = await calc.prompt(body.input)
        return {"text": response.text, "iterations": response.iterations}

    return app


class Prompt(BaseModel):
    input: str


def bare_app(port: int) -> Any:
    from fastapi import FastAPI

    from daimon import ChatRequest, Message

    app = FastAPI()

    @app.post("/prompt")
    async def prompt(body: Prompt) -> dict[str, Any]:
        user = Message.user(body.input)
        first = model(ChatRequest(messages=(user,)))
        call = first.message.tool_calls[0]
        result = await add(**call.arguments)
        tool_message = Message.tool(call.id, str(result), name=call.name)
        second = model(ChatRequest(messages=(user, first.message, tool_message)))
        return {"text": second.text, "iterations": 2}

    return app


def serve(kind: str, port: int) -> None:
    import uvicorn

    app = {"daimon": daimon_app, "agent": agent_app, "bare": bare_app}[kind](port)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ------------------------------------------------------------------------------ the load


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(kind: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(HERE), "--serve", kind, "--port", str(port)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"the {kind} server did not start") from None
            time.sleep(0.05)
    return process, port


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used so far, where /proc tells it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check(port: int) -> None:
    import httpx

    reply = httpx.post(f"http://127.0.0.1:{port}/prompt", json=BODY, timeout=10)
    reply.raise_for_status()
    assert reply.json()["text"] == ANSWER, reply.text


WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
"""


def run_wrk(port: int, connections: int, duration: float) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT.format(body=json.dumps(BODY)))
    threads = min(2, connections)
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration:g}s",
        "--latency",
        "-s",
        script.name,
        f"http://127.0.0.1:{port}/prompt",
    ]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    Path(script.name).unlink()
    if "Non-2xx" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk saw failures:\n{output}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p50 = _wrk_ms(re.search(r"50%\s+([\d.]+\w+)", output).group(1))  # type: ignore[union-attr]
    p99 = _wrk_ms(re.search(r"99%\s+([\d.]+\w+)", output).group(1))  # type: ignore[union-attr]
    count = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "requests": count}


def _wrk_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def run_asyncio(port: int, connections: int, duration: float) -> dict[str, float]:
    """A small keep-alive HTTP/1.1 load generator on raw asyncio streams (httpx's pool, under
    64 concurrent requests, measures itself more than the server)."""
    body = json.dumps(BODY).encode()
    request = (
        f"POST /prompt HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    async def main() -> dict[str, float]:
        latencies: list[float] = []
        stop = time.perf_counter() + duration

        async def worker() -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                while time.perf_counter() < stop:
                    started = time.perf_counter()
                    writer.write(request)
                    head = await reader.readuntil(b"\r\n\r\n")
                    if not head.startswith(b"HTTP/1.1 200"):
                        raise RuntimeError(head.decode("latin-1"))
                    length = re.search(rb"(?i)content-length: (\d+)", head)
                    assert length is not None
                    await reader.readexactly(int(length.group(1)))
                    latencies.append(time.perf_counter() - started)
            finally:
                writer.close()

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        wall = time.perf_counter() - began
        latencies.sort()
        return {
            "rps": len(latencies) / wall,
            "p50_ms": latencies[len(latencies) // 2] * 1e3,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
            "requests": len(latencies),
        }

    return asyncio.run(main())


def measure(kind: str, load: str, connections: int, duration: float) -> dict[str, float]:
    process, port = start(kind)
    try:
        check(port)
        runner = run_wrk if load == "wrk" else run_asyncio
        runner(port, connections, min(2.0, duration))  # warm-up
        before = cpu_seconds(process.pid)
        result = runner(port, connections, duration)
        after = cpu_seconds(process.pid)
        if before is not None and after is not None:
            result["cpu_us"] = (after - before) / result.pop("requests") * 1e6
        return result
    finally:
        process.terminate()
        process.wait(timeout=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load", choices=("wrk", "asyncio"), default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--serve", choices=tuple(KINDS), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    load = args.load or ("wrk" if shutil.which("wrk") else "asyncio")
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    for _ in range(args.rounds):
        for kind in KINDS:
            results[kind].append(measure(kind, load, args.connections, args.duration))
    table = {
        kind: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for kind, runs in results.items()
    }
    print(
        f"POST /prompt, model -> tool -> model, {args.connections} connections, load: {load}, "
        f"{args.rounds} x {args.duration:g} s, median of rounds"
    )
    print(f"{'server':<30}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'server CPU us/req':>20}")
    for kind, label in KINDS.items():
        row = table[kind]
        cpu = f"{row['cpu_us']:.0f}" if "cpu_us" in row else "n/a"
        print(
            f"{label:<30}{row['rps']:>10.0f}{row['p50_ms']:>10.1f}{row['p99_ms']:>10.1f}{cpu:>20}"
        )
    ratio = table["daimon"]["rps"] / table["bare"]["rps"]
    print(f"daimon.server / bare FastAPI throughput: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"load": load, "results": results, "median": table}))


if __name__ == "__main__":
    main()
