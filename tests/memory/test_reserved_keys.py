"""A model's tool arguments are data: keys that look like code-reviving markers are stored too.

Issue 17, item 3: ``{"$type": "Order"}`` (ordinary .NET-style JSON) or ``{"__module__": 1}`` in a
model's arguments used to fail the memory write after the tool ran, losing the whole turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Message, Role, ToolCall
from daimon.core import Memory, SerializationError
from daimon.core.tools import ToolOutput
from daimon.kit.memory_records import decode_message, encode_message
from daimon.memory.redis import RedisMemory
from daimon.memory.sqlite import SQLiteMemory
from daimon.models import FunctionModel
from daimon.tools import RunContext

ARGUMENTS: dict[str, Any] = {
    "$type": "Order",
    "__module__": 1,
    "!!python/object/apply:os.system": "x",
    "~$type": 2,
    "nested": [{"py/object": "Order", "~~__class__": None, "__typename": "Order"}],
}


class PlaceOrder:
    """A tool taking any JSON object (as a .NET-minded model might send), echoing it back."""

    name = "place_order"
    description = "Place an order."

    def __init__(self) -> None:
        self.parameters_schema: dict[str, Any] = {"type": "object"}
        self.received: list[dict[str, Any]] = []

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        self.received.append(arguments)
        return ToolOutput.json({"placed": arguments})


def model(request: ChatRequest) -> ChatResponse:
    """Places one order per user message, then answers."""
    if request.messages[-1].role is Role.USER:
        return ChatResponse.tool_use(ToolCall(id="c1", name="place_order", arguments=ARGUMENTS))
    return ChatResponse.reply("placed")


async def check_turns_stored(open_memory: Callable[[], Awaitable[Memory]]) -> None:
    tool = PlaceOrder()
    memory = await open_memory()
    agent = Agent(FunctionModel(model), tools=[tool], memory=memory)
    await agent.prompt("order", session_id="s")
    await agent.prompt("again", session_id="s")  # reads the stored turn back to send it on
    assert tool.received == [ARGUMENTS, ARGUMENTS]
    reopened = await open_memory()  # another handle: what is stored, not what is cached
    stored = await reopened.get_messages("s")
    assert [m.role for m in stored] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT] * 2
    assert [m.tool_calls[0].arguments for m in stored if m.tool_calls] == [ARGUMENTS, ARGUMENTS]
    assert stored[2].text == ToolOutput.json({"placed": ARGUMENTS}).content


async def test_sqlite_memory_stores_marker_like_argument_keys(tmp_path: Path) -> None:
    handles: list[SQLiteMemory] = []

    async def open_memory() -> Memory:
        handles.append(SQLiteMemory(tmp_path / "memory.db"))
        return handles[-1]

    try:
        await check_turns_stored(open_memory)
    finally:
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def redis_handles() -> AsyncIterator[list[RedisMemory]]:
    handles: list[RedisMemory] = []
    yield handles
    for handle in handles:
        await handle.aclose()


@pytest.mark.service("redis")
async def test_redis_memory_stores_marker_like_argument_keys(
    redis_url: str, redis_prefix: str, redis_handles: list[RedisMemory]
) -> None:
    async def open_memory() -> Memory:
        redis_handles.append(RedisMemory(redis_url, prefix=redis_prefix))
        return redis_handles[-1]

    await check_turns_stored(open_memory)


def test_a_message_record_keeps_marker_like_keys() -> None:
    message = Message.assistant("", [ToolCall(id="c", name="t", arguments=ARGUMENTS)])
    text = encode_message(message)
    assert '"~$type": "Order"' in text and '"~~$type": 2' in text  # escaped where it is stored
    assert decode_message("s", 0, text) == message


def test_a_planted_bare_marker_is_still_refused() -> None:
    planted = (
        '{"daimon":1,"data":{"role":"assistant","tool_calls":[{"id":"c","name":"t",'
        '"arguments":{"!!python/object/apply:os.system":"id"}}]}}'
    )
    with pytest.raises(SerializationError, match="code-reviving marker"):
        decode_message("s", 0, planted)
