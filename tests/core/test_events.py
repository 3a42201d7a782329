"""Stream events."""

from __future__ import annotations

import typing

from daimon.core import (
    Done,
    ErrorEvent,
    RateLimitWait,
    ReasoningEvent,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolOutput,
    ToolResult,
    UsageEvent,
)
from daimon.core.codec import from_data, to_data


def test_every_variant_has_a_distinct_kind() -> None:
    variants = typing.get_args(StreamEvent)
    assert set(variants) == {
        TextDelta,
        ToolCallStart,
        ToolCallDelta,
        ToolCallEnd,
        ToolResult,
        ReasoningEvent,
        UsageEvent,
        ErrorEvent,
        RateLimitWait,
        Done,
    }
    kinds = [v.__dataclass_fields__["kind"].default for v in variants]
    assert len(set(kinds)) == len(kinds), kinds


def test_match_is_exhaustive_by_class() -> None:
    def describe(event: StreamEvent) -> str:
        match event:
            case TextDelta(text=text):
                return f"text {text}"
            case ToolCallStart() | ToolCallDelta() | ToolCallEnd():
                return "call"
            case ToolResult(output=output):
                return f"result {output.content}"
            case ReasoningEvent() | UsageEvent() | ErrorEvent() | RateLimitWait() | Done():
                return event.kind

    assert describe(TextDelta(text="a")) == "text a"
    assert describe(ToolResult(call_id="c", name="f", output=ToolOutput.text("ok"))) == "result ok"
    assert describe(Done()) == "done"


def test_tool_result_is_error_follows_the_output() -> None:
    assert ToolResult(call_id="c", name="f", output=ToolOutput.error("boom")).is_error
    assert not ToolResult(call_id="c", name="f", output=ToolOutput.text("ok")).is_error


def test_kind_is_written_but_not_a_constructor_argument() -> None:
    assert to_data(ErrorEvent(message="m"))["kind"] == "error"
    assert from_data(StreamEvent, {"kind": "error", "message": "m"}) == ErrorEvent(message="m")
