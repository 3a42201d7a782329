"""StreamAccumulator and events_from_response."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from daimon.core import (
    ChatResponse,
    Done,
    ErrorEvent,
    Message,
    StopReason,
    StreamClosedError,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    UsageEvent,
)
from daimon.kit.streaming import StreamAccumulator, events_from_response, stream_from_response


def _core_strategies() -> Any:
    """tests/core/strategies.py, the core types' Hypothesis strategies (tests/ is not a package)."""
    qualified = "_daimon_tests_core_strategies"
    if qualified not in sys.modules:
        path = Path(__file__).parents[1] / "core" / "strategies.py"
        spec = importlib.util.spec_from_file_location(qualified, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


s = _core_strategies()


def _accumulate(events: list[StreamEvent]) -> ChatResponse:
    acc = StreamAccumulator()
    for event in events:
        acc.add(event)
    return acc.response()


def test_text_is_joined() -> None:
    acc = StreamAccumulator()
    for event in (TextDelta(text="Hel"), TextDelta(text="lo")):
        acc.add(event)
    assert acc.text == "Hello"
    acc.add(UsageEvent(usage=Usage(input_tokens=3, output_tokens=2)))
    acc.add(Done(stop_reason=StopReason.END_TURN, model="m-1"))
    response = acc.response()
    assert response == ChatResponse(
        message=Message.assistant("Hello"),
        stop_reason=StopReason.END_TURN,
        usage=Usage(input_tokens=3, output_tokens=2),
        model="m-1",
    )


def test_parallel_tool_calls_from_interleaved_deltas() -> None:
    response = _accumulate(
        [
            TextDelta(text="Let me check."),
            ToolCallStart(call_id="a", name="weather", index=0),
            ToolCallStart(call_id="b", name="time", index=1),
            ToolCallDelta(call_id="a", arguments_delta='{"city": ', index=0),
            ToolCallDelta(call_id="b", arguments_delta='{"tz": "UTC"}', index=1),
            ToolCallDelta(call_id="a", arguments_delta='"Paris"}', index=0),
            Done(),
        ]
    )
    assert response.message.tool_calls == (
        ToolCall(id="a", name="weather", arguments={"city": "Paris"}),
        ToolCall(id="b", name="time", arguments={"tz": "UTC"}),
    )
    assert response.text == "Let me check."
    assert response.stop_reason is StopReason.TOOL_USE  # a turn with calls is a tool-use turn


def test_tool_call_end_wins_over_deltas() -> None:
    final = ToolCall(id="a", name="weather", arguments={"city": "Lyon"})
    response = _accumulate(
        [
            ToolCallStart(call_id="a", name="weather"),
            ToolCallDelta(call_id="a", arguments_delta='{"city": "Par'),
            ToolCallEnd(call=final),
            Done(stop_reason=StopReason.TOOL_USE),
        ]
    )
    assert response.message.tool_calls == (final,)


def test_end_without_start_and_delta_without_start() -> None:
    end_only = ToolCall(id="x", name="f", arguments={"n": 1})
    response = _accumulate(
        [
            ToolCallDelta(call_id="d", arguments_delta='{"m": 2}'),
            ToolCallEnd(call=end_only),
            Done(),
        ]
    )
    assert [call.id for call in response.message.tool_calls] == ["d", "x"]
    assert response.message.tool_calls[0].arguments == {"m": 2}
    assert response.message.tool_calls[1] == end_only


def test_start_after_end_keeps_one_call_in_first_position() -> None:
    call = ToolCall(id="a", name="f", arguments={"k": 1})
    response = _accumulate([ToolCallEnd(call=call), ToolCallStart(call_id="a", name="f"), Done()])
    assert response.message.tool_calls == (call,)


def test_invalid_json_arguments_are_kept_raw() -> None:
    response = _accumulate(
        [
            ToolCallStart(call_id="a", name="f"),
            ToolCallDelta(call_id="a", arguments_delta='{"x": '),
            Done(stop_reason=StopReason.MAX_TOKENS),
        ]
    )
    assert response.message.tool_calls == (ToolCall(id="a", name="f", arguments='{"x": '),)
    assert response.stop_reason is StopReason.MAX_TOKENS  # only END_TURN becomes TOOL_USE


def test_empty_arguments_are_an_empty_object() -> None:
    response = _accumulate([ToolCallStart(call_id="a", name="f"), Done()])
    assert response.message.tool_calls == (ToolCall(id="a", name="f", arguments={}),)


def test_missing_done_is_a_closed_stream() -> None:
    acc = StreamAccumulator()
    acc.add(TextDelta(text="partial"))
    acc.add(ErrorEvent(message="connection reset"))
    with pytest.raises(StreamClosedError, match="without a Done event") as caught:
        acc.response()
    assert caught.value.retryable


def test_last_usage_event_wins() -> None:
    response = _accumulate(
        [
            UsageEvent(usage=Usage(input_tokens=1)),
            UsageEvent(usage=Usage(input_tokens=5, output_tokens=7)),
            Done(),
        ]
    )
    assert response.usage == Usage(input_tokens=5, output_tokens=7)


def test_events_from_response_shape() -> None:
    call = ToolCall(id="a", name="f", arguments={"x": 1})
    response = ChatResponse(
        message=Message.assistant("hi", [call]),
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=2),
        model="m",
    )
    assert list(events_from_response(response)) == [
        TextDelta(text="hi"),
        ToolCallStart(call_id="a", name="f", index=0),
        ToolCallDelta(call_id="a", arguments_delta='{"x":1}', index=0),
        ToolCallEnd(call=call, index=0),
        UsageEvent(usage=Usage(input_tokens=2)),
        Done(stop_reason=StopReason.TOOL_USE, model="m"),
    ]
    empty = ChatResponse(message=Message.assistant(""))
    assert list(events_from_response(empty)) == [UsageEvent(usage=Usage()), Done()]


@s.PROPERTY_SETTINGS
@given(response=s.streamable_responses())
def test_events_round_trip_through_the_accumulator(response: ChatResponse) -> None:
    assert _accumulate(list(events_from_response(response))) == response


@s.PROPERTY_SETTINGS
@given(response=s.streamable_responses())
def test_start_and_delta_alone_rebuild_parsed_arguments(response: ChatResponse) -> None:
    # Without the ToolCallEnd events (providers that only stream deltas), object arguments
    # still come back equal, because the deltas carry their JSON text.
    events = [e for e in events_from_response(response) if not isinstance(e, ToolCallEnd)]
    rebuilt = _accumulate(events)
    for original, call in zip(response.message.tool_calls, rebuilt.message.tool_calls, strict=True):
        assert (call.id, call.name) == (original.id, original.name)
        if isinstance(original.arguments, dict):
            assert call.arguments == original.arguments


async def test_stream_from_response() -> None:
    response = ChatResponse(message=Message.assistant("hi"), model="m")
    events = [event async for event in stream_from_response(response)]
    assert events == list(events_from_response(response))


def test_reasoning_joins_the_message_and_round_trips() -> None:
    from daimon.core import Reasoning, ReasoningEvent

    reasoning = Reasoning(provider="openai-responses", text="hm", data={"id": "rs_1"})
    response = ChatResponse(
        message=Message.assistant("ok", reasoning=[reasoning]),
        usage=Usage(output_tokens=9, reasoning_tokens=7, requests=1),
    )
    events = list(events_from_response(response))
    assert events[0] == ReasoningEvent(reasoning=reasoning)
    accumulator = StreamAccumulator()
    for event in events:
        accumulator.add(event)
    assert accumulator.response() == response
