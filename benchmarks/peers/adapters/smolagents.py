"""smolagents: ``ToolCallingAgent`` with a custom ``smolagents.Model`` subclass.

smolagents has no async API: ``run`` is blocking, so the runner calls it directly (run metrics)
or from one thread per run (concurrency metrics), and the sleepy model uses ``time.sleep``. Its
agents keep run memory, so they are never shared: both concurrency metrics use an agent per run.
A ToolCallingAgent can only finish through its built-in ``final_answer`` tool, so model call 2 is
a ``final_answer`` tool call. Logging is off (``verbosity_level=LogLevel.OFF``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from importlib.metadata import version as _version
from typing import Any

import common
from common import COUNTS, PROMPT, SLEEP, STREAM_PROMPT

IMPORTS = "from smolagents import ToolCallingAgent, Model, tool"
BLOCKING = True
"""run(agent) and stream(n) are plain functions; concurrency uses threads."""
SHAREABLE = False
"""An agent holds its run's memory: one agent per concurrent run."""


def version() -> str:
    return _version("smolagents")


from smolagents import LogLevel, Model, ToolCallingAgent, tool  # noqa: E402
from smolagents.models import (  # noqa: E402
    ChatMessage,
    ChatMessageStreamDelta,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    ChatMessageToolCallStreamDelta,
    MessageRole,
)


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return common.add(a, b)


def _call(name: str, arguments: dict[str, Any]) -> ChatMessageToolCall:
    return ChatMessageToolCall(
        id="c1",
        type="function",
        function=ChatMessageToolCallFunction(name=name, arguments=arguments),
    )


def _answer(messages: list[Any]) -> ChatMessage:
    COUNTS["model"] += 1
    last = messages[-1]
    role = last.role if isinstance(last, ChatMessage) else last["role"]
    if role == MessageRole.TOOL_RESPONSE:
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content=None,
            tool_calls=[_call("final_answer", {"answer": common.ANSWER})],
        )
    return ChatMessage(
        role=MessageRole.ASSISTANT, content=None, tool_calls=[_call("add", {"a": 2, "b": 3})]
    )


class FakeModel(Model):
    def __init__(self, sleepy: bool = False, deltas: int = 0) -> None:
        super().__init__(model_id="fake")
        self.sleepy = sleepy
        self.deltas = deltas

    def generate(
        self,
        messages: list[Any],
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> ChatMessage:
        if self.sleepy:
            time.sleep(SLEEP)
        return _answer(messages)

    def generate_stream(
        self,
        messages: list[Any],
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatMessageStreamDelta]:
        for _ in range(self.deltas):
            yield ChatMessageStreamDelta(content="x")
        yield ChatMessageStreamDelta(
            tool_calls=[
                ChatMessageToolCallStreamDelta(
                    index=0,
                    id="c1",
                    type="function",
                    function=ChatMessageToolCallFunction(
                        name="final_answer", arguments='{"answer": "done"}'
                    ),
                )
            ]
        )


def build(sleepy: bool = False) -> ToolCallingAgent:
    return ToolCallingAgent(
        tools=[add], model=FakeModel(sleepy=sleepy), verbosity_level=LogLevel.OFF
    )


def run(agent: ToolCallingAgent) -> str:
    return agent.run(PROMPT)  # type: ignore[no-any-return]


def stream(n: int) -> int:
    agent = ToolCallingAgent(
        tools=[], model=FakeModel(deltas=n), verbosity_level=LogLevel.OFF, stream_outputs=True
    )
    count = 0
    for event in agent.run(STREAM_PROMPT, stream=True):
        if isinstance(event, ChatMessageStreamDelta) and event.content:
            count += 1
    return count
