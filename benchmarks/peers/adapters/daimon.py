"""daimon: FunctionModel (daimon's own test model) plays the model; @tool wraps the function."""

from __future__ import annotations

import asyncio
from importlib.metadata import version as _version
from typing import Any

from common import COUNTS, PROMPT, SLEEP, STREAM_PROMPT, tool_function

IMPORTS = "from daimon import Agent, tool"
# Also timed on its own: `import daimon` (the lazy namespace alone).
IMPORTS_BARE = "import daimon"


def version() -> str:
    return _version("daimon-agents")


import daimon  # noqa: E402 - after IMPORTS, which the import metric times in a fresh process
from daimon.models import FunctionModel  # noqa: E402

ADD = daimon.tool(name="add")(tool_function())
_CALL = daimon.ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3})
_TOOL_TURN = daimon.ChatResponse.tool_use(_CALL)
_TOOL = daimon.Role.TOOL


def respond(request: daimon.ChatRequest) -> daimon.ChatResponse:
    COUNTS["model"] += 1
    last = request.messages[-1]
    if last.role is _TOOL:
        return daimon.ChatResponse.reply(f"The answer is {last.content}.")
    return _TOOL_TURN


async def respond_slowly(request: daimon.ChatRequest) -> daimon.ChatResponse:
    await asyncio.sleep(SLEEP)
    return respond(request)


def build(sleepy: bool = False) -> daimon.Agent:
    return daimon.Agent(FunctionModel(respond_slowly if sleepy else respond), tools=[ADD])


async def run(agent: daimon.Agent) -> str:
    return (await agent.prompt(PROMPT)).text


async def stream(n: int) -> int:
    delta = daimon.TextDelta(text="x")

    async def deltas(request: Any) -> Any:
        for _ in range(n):
            yield delta

    agent = daimon.Agent(FunctionModel(stream_function=deltas))
    count = 0
    text_delta = daimon.TextDelta
    async for event in agent.prompt_stream(STREAM_PROMPT):
        if type(event) is text_delta:
            count += 1
    return count
