from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from daimon import BuilderError, ChatRequest, ChatResponse, Done, Message, StopReason, TextDelta
from daimon.core import ToolCall, ToolCallEnd
from daimon.models import FunctionModel

REQUEST = ChatRequest(messages=(Message.user("hi"),))


async def test_sync_and_async_functions_and_plain_text() -> None:
    async def answer(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply("async " + request.messages[-1].text)

    assert (await FunctionModel(answer).generate(REQUEST)).text == "async hi"
    assert (await FunctionModel(lambda r: "plain").generate(REQUEST)).text == "plain"


async def test_generate_stream_falls_back_on_generate() -> None:
    events = [e async for e in FunctionModel(lambda r: "text").generate_stream(REQUEST)]
    assert isinstance(events[0], TextDelta) and events[0].text == "text"
    assert isinstance(events[-1], Done)


async def test_stream_function_adds_done_and_generate_drains_it() -> None:
    async def stream(request: ChatRequest) -> AsyncIterator[object]:
        yield "a"
        yield "b"
        yield ToolCallEnd(call=ToolCall(id="1", name="t", arguments={}))

    model = FunctionModel(stream_function=stream)  # type: ignore[arg-type]
    events = [e async for e in model.generate_stream(REQUEST)]
    last = events[-1]
    assert isinstance(last, Done) and last.stop_reason is StopReason.TOOL_USE
    response = await model.generate(REQUEST)
    assert response.text == "ab" and response.message.tool_calls[0].name == "t"


def test_needs_a_function() -> None:
    with pytest.raises(BuilderError):
        FunctionModel()


async def test_wrong_return_type_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="ChatResponse or str"):
        await FunctionModel(lambda r: 42).generate(REQUEST)  # type: ignore[arg-type,return-value]
