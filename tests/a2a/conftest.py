"""Shared helpers for the A2A tests: servers on loopback, agents on scripted models."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("a2a", reason="needs the a2a extra")
pytest.importorskip("uvicorn", reason="needs the a2a extra")

from daimon import Agent, ChatRequest, ChatResponse, Role
from daimon.models import FunctionModel
from daimon.testing.servers import serving as serve_in_loop

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serving(app_for_port: Any) -> contextlib.AbstractAsyncContextManager[str]:
    """Serve ``app_for_port(port)`` with uvicorn on a free loopback port; yields its base URL."""
    return serve_in_loop(app_for_port=app_for_port)


class Gate:
    """Lets a test hold an agent's model call until it says go (for cancel tests)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.go = asyncio.Event()
        """Set it to let the held call go on (it waits at most 60 s)."""


def streaming_agent(name: str = "echo", gate: Gate | None = None) -> Agent:
    """Streams ``Hello, `` then ``you said: <prompt>``; with ``gate`` it first waits for
    ``gate.go``; prompts starting with ``fail`` raise."""

    async def stream(request: ChatRequest) -> AsyncIterator[str]:
        text = request.messages[-1].text
        if text.startswith("fail"):
            raise ValueError("the model fell over")
        if gate is not None:
            gate.entered.set()
            try:
                await asyncio.wait_for(gate.go.wait(), 60)
            except asyncio.CancelledError:
                gate.cancelled.set()
                raise
        yield "Hello, "
        yield f"you said: {text}"

    return Agent(FunctionModel(stream_function=stream), name=name)


def counting_agent(name: str = "counter") -> Agent:
    """Answers ``<n>: <first> | <second> | ...``: the user messages it was given, so an answer
    shows how much of the conversation the run saw."""

    def answer(request: ChatRequest) -> ChatResponse:
        said = [m.text for m in request.messages if m.role is Role.USER]
        return ChatResponse.reply(f"{len(said)}: {' | '.join(said)}")

    return Agent(FunctionModel(answer), name=name)


@pytest.fixture
def gate() -> Iterator[Gate]:
    yield Gate()
