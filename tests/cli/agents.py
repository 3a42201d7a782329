"""Agents on scripted models, for driving the ``daimon`` command in tests (``--agent agents:...``).

Not a test module: the CLI tests put this folder on ``PYTHONPATH`` of the ``daimon`` process.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, ToolCall
from daimon.cli.demo import calculator
from daimon.models import FunctionModel
from daimon.multiagent import Supervisor
from daimon.orchestration import WorkflowBuilder, workflow_node


def _calculating(request: ChatRequest) -> ChatResponse:
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        call = ToolCall(id="call-1", name="calculator", arguments={"expression": "12.5 * 4 + 3"})
        return ChatResponse.tool_use(call)
    return ChatResponse.reply(f"12.5 * 4 + 3 = {results[-1]}")


def _remembering(request: ChatRequest) -> ChatResponse:
    said = [m.text for m in request.messages if m.role is Role.USER]
    return ChatResponse.reply(f"turn {len(said)}: you said {said[-1]!r}")


def _failing(request: ChatRequest) -> ChatResponse:
    raise ModelError("the provider is down", status_code=503, retryable=True, provider="fake")


async def _slow(request: ChatRequest) -> ChatResponse:
    await asyncio.sleep(60)
    return ChatResponse.reply("too late")


async def _lingering(request: ChatRequest) -> ChatResponse:
    """Writes the prompt to ``$DAIMON_TEST_STARTED`` (a file); with ``$DAIMON_TEST_LINGER``
    set it then waits long enough to be killed mid-task."""
    prompt = request.messages[-1].text
    started = os.environ.get("DAIMON_TEST_STARTED")
    if started:
        await asyncio.to_thread(Path(started).write_text, prompt)
    if os.environ.get("DAIMON_TEST_LINGER"):
        await asyncio.sleep(120)
    return ChatResponse.reply(f"done: {prompt}")


def _describing(request: ChatRequest) -> ChatResponse:
    """Says which files came with the prompt: what ``daimon run --file`` sent."""
    user = [m for m in request.messages if m.role is Role.USER][-1]
    seen = [f"{type(p).__name__} {p.media_type} {len(p.data or b'')}" for p in user.media]
    return ChatResponse.reply(f"{user.text} | " + ", ".join(seen))


calculating = Agent(FunctionModel(_calculating), tools=[calculator], name="calculating")
describing = Agent(FunctionModel(_describing), name="describing")
remembering = Agent(FunctionModel(_remembering), name="remembering")
failing = Agent(FunctionModel(_failing), name="failing")
slow = Agent(FunctionModel(_slow), name="slow")
lingering = Agent(FunctionModel(_lingering), name="lingering")
not_an_agent = 42


def make_agent() -> Agent:
    """A factory, as ``--agent agents:make_agent``."""
    return Agent(FunctionModel(_calculating), tools=[calculator], name="made")


def _leading(request: ChatRequest) -> ChatResponse:
    """Delegates the prompt to ``calculating``, then answers ``team: <its answer>``."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return ChatResponse.reply(f"team: {last.text}")
    task = {"agent": "calculating", "task": last.text}
    return ChatResponse.tool_use(ToolCall(id="d-1", name="delegate", arguments=task))


team = Supervisor(FunctionModel(_leading), {"calculating": calculating}, name="team")


@workflow_node(output="loud")
def _shout(text: str) -> str:
    return text.upper() + "!"


shout = WorkflowBuilder("shout", inputs={"text": str}).add(_shout, name="shout").build()


def make_team() -> Supervisor:
    """A factory of a promptable that is not an Agent, as ``agents:make_team``."""
    return Supervisor(FunctionModel(_leading), {"calculating": calculating}, name="made-team")


def _booking(request: ChatRequest) -> ChatResponse:
    """Calls the MCP server's ``book`` tool on every prompt, then repeats what it returned."""
    last = request.messages[-1]
    if last.role is Role.USER:
        return ChatResponse.tool_use(ToolCall(id="book-1", name="book", arguments={}))
    return ChatResponse.reply(f"booked: {last.text}")


booking = Agent(FunctionModel(_booking), name="booking")
