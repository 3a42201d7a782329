"""OpenAI Agents SDK: a custom ``agents.Model`` subclass.

Output items are built with the SDK's own ``agents.testing`` helpers (``function_call``,
``assistant_message``); the SDK's ``ScriptedModel`` is not used because it is a consumed queue of
steps that also records and deep-copies every call, which a stateless fake must not do. The tool
is wrapped once at module level with ``function_tool``; tracing is off (``common.OFFLINE_ENV``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib.metadata import version as _version
from typing import Any

from common import COUNTS, PROMPT, SLEEP, STREAM_PROMPT, tool_function

IMPORTS = (
    "from agents import Agent, Runner, function_tool\nfrom agents.models.interface import Model"
)


def version() -> str:
    return _version("openai-agents")


from agents import (  # noqa: E402
    Agent,
    ModelResponse,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model  # noqa: E402
from agents.testing import assistant_message, function_call  # noqa: E402
from openai.types.responses import (  # noqa: E402
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseTextDeltaEvent,
)

set_tracing_disabled(True)
TOOL = function_tool(tool_function(), name_override="add")


def _answer(input: Any) -> ModelResponse:
    COUNTS["model"] += 1
    last = input[-1] if isinstance(input, list) else None
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        item = assistant_message(f"The answer is {last['output']}.")
    else:
        item = function_call("add", {"a": 2, "b": 3}, call_id="c1")
    return ModelResponse(output=[item], usage=Usage(), response_id=None)


def _response(text: str, status: Any) -> Response:
    return Response(
        id="fake",
        created_at=0,
        model="fake",
        object="response",
        output=[assistant_message(text)] if text else [],
        tool_choice="none",
        tools=[],
        top_p=None,
        parallel_tool_calls=False,
        status=status,
    )


class FakeModel(Model):
    def __init__(self, sleepy: bool = False, deltas: int = 0) -> None:
        self.sleepy = sleepy
        self.deltas = deltas

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        if self.sleepy:
            await asyncio.sleep(SLEEP)
        return _answer(input)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        yield ResponseCreatedEvent(
            type="response.created", response=_response("", "in_progress"), sequence_number=0
        )
        delta = ResponseTextDeltaEvent(
            type="response.output_text.delta",
            content_index=0,
            delta="x",
            item_id="scripted-message",
            logprobs=[],
            output_index=0,
            sequence_number=1,
        )
        for _ in range(self.deltas):
            yield delta
        yield ResponseCompletedEvent(
            type="response.completed",
            response=_response("x" * self.deltas, "completed"),
            sequence_number=2,
        )


def build(sleepy: bool = False) -> Agent[Any]:
    return Agent(name="agent", model=FakeModel(sleepy=sleepy), tools=[TOOL])


async def run(agent: Agent[Any]) -> str:
    return (await Runner.run(agent, PROMPT)).final_output  # type: ignore[no-any-return]


async def stream(n: int) -> int:
    agent = Agent(name="agent", model=FakeModel(deltas=n))
    result = Runner.run_streamed(agent, STREAM_PROMPT)
    count = 0
    async for event in result.stream_events():
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
            count += 1
    return count
