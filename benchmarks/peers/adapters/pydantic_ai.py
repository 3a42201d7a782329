"""PydanticAI: its own ``FunctionModel`` (async functions: sync ones would run in a thread).

The tool is wrapped once at module level with ``pydantic_ai.Tool``; text streaming reads
``stream_text(delta=True, debounce_by=None)`` (the default 0.1 s debounce would batch deltas).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib.metadata import version as _version
from typing import Any

from common import COUNTS, PROMPT, SLEEP, STREAM_PROMPT, tool_function

IMPORTS = (
    "from pydantic_ai import Agent, Tool\nfrom pydantic_ai.models.function import FunctionModel"
)


def version() -> str:
    return _version("pydantic-ai-slim")


from pydantic_ai import Agent, Tool  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

TOOL = Tool(tool_function(), name="add")


def _answer(messages: list[Any]) -> ModelResponse:
    COUNTS["model"] += 1
    for part in messages[-1].parts:
        if isinstance(part, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"The answer is {part.content}.")])
    return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="c1")])


async def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
    return _answer(messages)


async def respond_slowly(messages: list[Any], info: AgentInfo) -> ModelResponse:
    await asyncio.sleep(SLEEP)
    return _answer(messages)


def build(sleepy: bool = False) -> Agent[None, str]:
    return Agent(FunctionModel(respond_slowly if sleepy else respond), tools=[TOOL])


async def run(agent: Agent[None, str]) -> str:
    return (await agent.run(PROMPT)).output


async def stream(n: int) -> int:
    async def deltas(messages: list[Any], info: AgentInfo) -> AsyncIterator[str]:
        for _ in range(n):
            yield "x"

    agent = Agent(FunctionModel(stream_function=deltas))
    count = 0
    async with agent.run_stream(STREAM_PROMPT) as result:
        async for _ in result.stream_text(delta=True, debounce_by=None):
            count += 1
    return count
