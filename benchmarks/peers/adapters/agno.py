"""Agno: a custom ``agno.models.base.Model`` subclass (Agno ships no fake model).

It returns Agno ``ModelResponse`` objects, with the tool call in the OpenAI format Agno uses
internally; the tool is the plain function, as in Agno's docs and its own benchmark.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from importlib.metadata import version as _version
from typing import Any

from common import COUNTS, PROMPT, SLEEP, STREAM_PROMPT, tool_function

IMPORTS = "from agno.agent import Agent\nfrom agno.models.base import Model"


def version() -> str:
    return _version("agno")


from agno.agent import Agent  # noqa: E402
from agno.models.base import Model  # noqa: E402
from agno.models.response import ModelResponse  # noqa: E402
from agno.run.agent import RunContentEvent  # noqa: E402

TOOL = tool_function()
_CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
}


def _answer(messages: list[Any]) -> ModelResponse:
    COUNTS["model"] += 1
    last = messages[-1]
    if last.role == "tool":
        return ModelResponse(role="assistant", content=f"The answer is {last.content}.")
    return ModelResponse(role="assistant", content="", tool_calls=[dict(_CALL)])


@dataclass
class FakeModel(Model):
    id: str = "fake"
    name: str = "Fake"
    provider: str = "Fake"
    sleepy: bool = False
    deltas: int = 0

    def invoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return _answer(kwargs["messages"])

    async def ainvoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if self.sleepy:
            await asyncio.sleep(SLEEP)
        return _answer(kwargs["messages"])

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Iterator[ModelResponse]:
        for _ in range(self.deltas):
            yield ModelResponse(role="assistant", content="x")

    async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ModelResponse]:
        for _ in range(self.deltas):
            yield ModelResponse(role="assistant", content="x")

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]


def build(sleepy: bool = False) -> Agent:
    return Agent(model=FakeModel(sleepy=sleepy), tools=[TOOL])


async def run(agent: Agent) -> str:
    return (await agent.arun(PROMPT)).content  # type: ignore[no-any-return]


async def stream(n: int) -> int:
    agent = Agent(model=FakeModel(deltas=n))
    count = 0
    async for event in agent.arun(STREAM_PROMPT, stream=True):
        if isinstance(event, RunContentEvent) and event.content:
            count += 1
    return count
