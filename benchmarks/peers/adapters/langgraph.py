"""LangGraph: ``create_react_agent`` with a custom langchain-core ``BaseChatModel``.

``GenericFakeChatModel`` replays one shared iterator and has no ``bind_tools``, so it cannot be
stateless or call tools; this model implements ``bind_tools`` (tools converted to the OpenAI
format, as chat models do), ``_agenerate`` and ``_astream``. The tool is wrapped once at module
level with langchain's ``@tool``. ``create_react_agent`` is deprecated in favour of
``langchain.agents.create_agent`` (package ``langchain``, not measured here).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import version as _version
from typing import Any

from common import COUNTS, PROMPT, SLEEP, STREAM_PROMPT, tool_function

IMPORTS = (
    "from langgraph.prebuilt import create_react_agent\n"
    "from langchain_core.language_models import BaseChatModel\n"
    "from langchain_core.tools import tool"
)


def version() -> str:
    return _version("langgraph")


warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*create_react_agent.*")

from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402

TOOL = tool("add")(tool_function())


def _answer(messages: list[Any]) -> AIMessage:
    COUNTS["model"] += 1
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(content=f"The answer is {last.content}.")
    return AIMessage(content="", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "c1"}])


class FakeChatModel(BaseChatModel):
    sleepy: bool = False
    deltas: int = 0

    @property
    def _llm_type(self) -> str:
        return "fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=_answer(messages))])

    async def _agenerate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if self.sleepy:
            await asyncio.sleep(SLEEP)
        return ChatResult(generations=[ChatGeneration(message=_answer(messages))])

    def _stream(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        for _ in range(self.deltas):
            yield ChatGenerationChunk(message=AIMessageChunk(content="x"))

    async def _astream(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        for _ in range(self.deltas):
            yield ChatGenerationChunk(message=AIMessageChunk(content="x"))


def build(sleepy: bool = False) -> Any:
    return create_react_agent(FakeChatModel(sleepy=sleepy), [TOOL])


async def run(agent: Any) -> str:
    result = await agent.ainvoke({"messages": [("user", PROMPT)]})
    return result["messages"][-1].content  # type: ignore[no-any-return]


async def stream(n: int) -> int:
    agent = create_react_agent(FakeChatModel(deltas=n), [TOOL])
    count = 0
    async for chunk, _meta in agent.astream(
        {"messages": [("user", STREAM_PROMPT)]}, stream_mode="messages"
    ):
        if isinstance(chunk, AIMessageChunk) and chunk.content:
            count += 1
    return count
