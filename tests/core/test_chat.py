"""Requests, responses and usage."""

from __future__ import annotations

from hypothesis import given

from daimon.core import ChatRequest, ChatResponse, Message, StopReason, ToolCall, Usage

from . import strategies as s


def test_usage_adds_up() -> None:
    a = Usage(input_tokens=10, output_tokens=5, cached_tokens=2, requests=1)
    b = Usage(input_tokens=1, output_tokens=2, cached_tokens=0, requests=1)
    assert a + b == Usage(input_tokens=11, output_tokens=7, cached_tokens=2, requests=2)
    assert (a + b).total_tokens == 18
    assert Usage().total_tokens == 0


@s.PROPERTY_SETTINGS
@given(a=s.usages, b=s.usages, c=s.usages)
def test_usage_addition_is_associative_with_zero(a: Usage, b: Usage, c: Usage) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + Usage() == a


def test_response_helpers() -> None:
    response = ChatResponse(message=Message.assistant("hello"))
    assert response.text == "hello"
    assert response.stop_reason is StopReason.END_TURN
    assert not response.has_tool_calls
    calling = ChatResponse(
        message=Message.assistant("", [ToolCall(id="c", name="f")]), stop_reason=StopReason.TOOL_USE
    )
    assert calling.has_tool_calls


def test_request_defaults() -> None:
    request = ChatRequest(messages=(Message.user("hi"),))
    assert request.tools == ()
    assert request.temperature is None
    assert request.response_format is None
    assert dict(request.settings) == {}
    assert request.settings is ChatRequest(messages=()).settings  # one shared, read-only mapping


def test_stop_reason_values_are_the_wire_strings() -> None:
    assert [r.value for r in StopReason] == ["end_turn", "tool_use", "max_tokens", "content_filter"]


def test_reasoning_tokens_add_up() -> None:
    one = Usage(output_tokens=10, reasoning_tokens=4, requests=1)
    assert (one + one).reasoning_tokens == 8
