"""Shared helpers for the MCP tests: real servers on loopback, and agents on scripted models."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("mcp", reason="needs the mcp extra")
pytest.importorskip("uvicorn", reason="needs the mcp extra")

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.models import FunctionModel
from daimon.testing.servers import serving as serve_in_loop
from daimon.tools import RunContext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SDK_SERVER = HERE / "sdk_server.py"
MINIMAL_SERVER = HERE / "minimal_server.py"
EXAMPLE_SERVER = ROOT / "examples" / "mcp_server.py"
PYTHON = sys.executable


def load(path: Path) -> ModuleType:
    """Import a helper file of this folder by path (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"daimon_test_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pids_in(directory: Path) -> list[int]:
    """The pids the minimal servers wrote into ``directory``."""
    return sorted(int(name) for name in os.listdir(directory))


def serving(app: Any, host: str = "127.0.0.1") -> contextlib.AbstractAsyncContextManager[str]:
    """Serve an ASGI app with uvicorn on a free port of ``host``; yields ``http://host:port``."""
    return serve_in_loop(app, host=host)


class Probe:
    """What the ``wait`` tool of :func:`make_agent` went through."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.finished = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.context: RunContext[Any] | None = None


def make_agent(probe: Probe) -> Agent:
    """An agent on a scripted model, with tools that add, raise, wait and need approval."""

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @tool
    def explode() -> str:
        """Always raises."""
        raise RuntimeError("exploded on purpose")

    @tool
    async def wait(ctx: RunContext[Any], seconds: float) -> str:
        """Wait, then say so."""
        probe.context = ctx
        probe.started.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            probe.cancelled.set()
            raise
        probe.finished.set()
        return "waited"

    @tool(requires_approval=True)
    def delete_everything() -> str:
        """Needs a person's approval."""
        return "deleted"

    def model(request: ChatRequest) -> ChatResponse:
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if not results:
            return ChatResponse.tool_use(ToolCall(id="1", name="add", arguments={"a": 40, "b": 2}))
        return ChatResponse.reply(f"the answer is {results[-1]}")

    return Agent(FunctionModel(model), name="helper", tools=[add, explode, wait, delete_everything])
