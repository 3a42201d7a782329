"""What every adapter shares: the task, the sleep, and the no-network guard.

The task, the same for every framework: the prompt asks for 2 + 3; model call 1 answers with a
tool call ``add(a=2, b=3)``; the framework runs the tool; model call 2 (which sees the tool
result) answers ``The answer is 5.``. Each framework drives the task with its own offline fake
model, built the way its documentation or test utilities suggest; the fake model is stateless
(it looks for a tool result in its input), so one agent can serve any number of concurrent runs.

This module is imported by every cell before the framework, so it stays standard library only.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

PROMPT = "What is 2 + 3?"
ANSWER = "The answer is 5."
SLEEP = 0.05
"""Seconds the sleepy fake model waits per call (the concurrency metrics)."""
CALL_ID = "call_1"
STREAM_PROMPT = "go"

# Telemetry and trace export off, Hugging Face offline: nothing in a cell may use the network.
OFFLINE_ENV = {
    "AGNO_TELEMETRY": "false",
    "AGNO_MONITOR": "false",
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "OPENAI_API_KEY": "sk-offline-benchmark",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
    "ANONYMIZED_TELEMETRY": "false",
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
    "LOGFIRE_IGNORE_NO_CONFIG": "1",
}

ATTEMPTS: list[str] = []
"""Network connections a cell tried (refused); the runner fails a cell that has any."""


def go_offline() -> None:
    """Set the offline variables and make every IPv4/IPv6 connect fail (and be recorded)."""
    import socket

    os.environ.update(OFFLINE_ENV)
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def guarded(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            ATTEMPTS.append(repr(address))
            raise OSError("network disabled by the benchmark")
        real_connect(sock, address)  # type: ignore[arg-type]

    def guarded_ex(sock: socket.socket, address: object) -> int:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            ATTEMPTS.append(repr(address))
            return 111  # ECONNREFUSED
        return real_connect_ex(sock, address)  # type: ignore[arg-type]

    socket.socket.connect = guarded  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_ex  # type: ignore[method-assign]


COUNTS = {"model": 0, "tool": 0}
"""Model and tool calls so far; the runner checks 2 and 1 per run."""


def add(a: int, b: int) -> int:
    """Add two integers."""
    COUNTS["tool"] += 1
    return a + b


async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    COUNTS["tool"] += 1
    return a + b


add_async.__name__ = add_async.__qualname__ = "add"  # every framework names the tool "add"

TOOL_MODE = os.environ.get("BENCH_TOOL", "async")
"""``async`` (default): every framework that accepts async tools gets ``add_async``; ``sync``:
the plain function ``add`` everywhere, as in the research harness (frameworks that run sync tools
in a worker thread then pay for the thread)."""


def tool_function() -> object:
    """The tool function this run uses (see TOOL_MODE)."""
    return add if TOOL_MODE == "sync" else add_async
