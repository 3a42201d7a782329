"""Messages API wire format: daimon requests to JSON, JSON responses and events to daimon.

Plain data both ways, plus the client plumbing; no SDK import. Only
:mod:`daimon.models.anthropic` uses it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.errors import StreamClosedError
from daimon.core.events import (
    Done,
    StreamEvent,
    TextDelta,
    UsageEvent,
)
from daimon.core.messages import ImagePart, Message, Role, TextPart, ToolCall
from daimon.kit.sdk_support import cache_exclusive_usage, stop_reason
from daimon.kit.streaming import PendingToolCall

__all__ = (
    "ERROR_STATUS",
    "EventDecoder",
    "REQUEST_OPTIONS",
    "messages_to_wire",
    "request_body",
    "response_from_wire",
)

REQUEST_OPTIONS = frozenset({"timeout", "extra_headers", "extra_query", "extra_body"})
"""Settings that are options of the SDK call rather than fields of the JSON body."""

_STOP_REASONS = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "pause_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "refusal": StopReason.CONTENT_FILTER,
}

ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status each error type stands for, for errors that arrive inside a stream."""


def request_body(request: ChatRequest, *, max_tokens: int) -> dict[str, Any]:
    """The JSON fields of a Messages request, apart from ``model`` and ``stream``."""
    system = "\n\n".join(m.text for m in request.messages if m.role is Role.SYSTEM)
    body: dict[str, Any] = {
        "messages": messages_to_wire(request.messages),
        "max_tokens": request.max_tokens if request.max_tokens is not None else max_tokens,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": s.name, "description": s.description, "input_schema": dict(s.parameters)}
            for s in request.tools
        ]
    if request.tool_choice is not None:
        body["tool_choice"] = _tool_choice(request.tool_choice)
    if request.temperature is not None:
        # Newer Claude models reject temperature with a 400; it is sent only when asked for.
        body["temperature"] = request.temperature
    if request.response_format is not None:
        body["output_config"] = {
            "format": {"type": "json_schema", "schema": dict(request.response_format.schema)}
        }
    return body


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


def messages_to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Messages API turns (system messages go to the top-level ``system``).

    Tool results become ``tool_result`` blocks of a user turn; consecutive ones share one turn.
    """
    turns: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None
    for message in messages:
        if message.role is Role.TOOL:
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.text,
            }
            if message.is_error:
                block["is_error"] = True
            if results is None:
                results = []
                turns.append({"role": "user", "content": results})
            results.append(block)
            continue
        results = None
        if message.role is Role.USER:
            content: Any = message.content
            if not isinstance(content, str):
                content = [_part(p) for p in content]
            turns.append({"role": "user", "content": content})
        elif message.role is Role.ASSISTANT:
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            for call in message.tool_calls:
                arguments = call.arguments
                if isinstance(arguments, str):
                    # The API wants an object: keep the model's unparseable text inside one.
                    arguments = {"raw_arguments": arguments}
                blocks.append(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}
                )
            if blocks:  # the API rejects empty turns
                turns.append({"role": "assistant", "content": blocks})
    return turns


def _part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if part.data is not None:
        data = base64.b64encode(part.data).decode("ascii")
        source = {"type": "base64", "media_type": part.media_type, "data": data}
    elif part.url is not None and part.url.startswith("data:") and ";base64," in part.url:
        media_type, _, data = part.url[5:].partition(";base64,")
        source = {"type": "base64", "media_type": media_type, "data": data}
    else:
        source = {"type": "url", "url": part.url or ""}
    return {"type": "image", "source": source}


def response_from_wire(data: Mapping[str, Any]) -> ChatResponse:
    """A :class:`ChatResponse` from a ``message`` object."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in data.get("content") or ():
        if block.get("type") == "text":
            text.append(block.get("text") or "")
        elif block.get("type") == "tool_use":
            arguments = block.get("input")
            calls.append(
                ToolCall(
                    id=block.get("id") or "", name=block.get("name") or "", arguments=arguments
                )
                if isinstance(arguments, dict)
                else ToolCall.from_json(
                    block.get("id") or "", block.get("name") or "", str(arguments)
                )
            )
    return ChatResponse(
        message=Message.assistant("".join(text), calls),
        stop_reason=stop_reason(_STOP_REASONS, data.get("stop_reason"), has_calls=bool(calls)),
        usage=_usage(data.get("usage")),
        model=data.get("model") or None,
    )


def _usage(usage: Mapping[str, Any] | None) -> Usage:
    """Usage from Anthropic's counts, whose ``input_tokens`` leave out cache reads and writes."""
    return cache_exclusive_usage(
        usage,
        input="input_tokens",
        output="output_tokens",
        read="cache_read_input_tokens",
        written="cache_creation_input_tokens",
    )


class EventDecoder:
    """Turns Messages stream events into daimon stream events.

    A stream that ends before ``message_stop`` was cut short.
    """

    __slots__ = ("_calls", "_model", "_saw_calls", "_stop", "_stopped", "_tool_count", "_usage")

    def __init__(self) -> None:
        self._calls: dict[int, PendingToolCall] = {}
        self._tool_count = 0
        self._model: str | None = None
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self._stopped = False
        self._saw_calls = False

    def feed(self, event: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The events one stream event carries."""
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                yield TextDelta(text=delta["text"])
            elif delta.get("type") == "input_json_delta" and delta.get("partial_json"):
                call = self._calls.get(event.get("index", 0))
                if call is not None:
                    yield call.add(delta["partial_json"])
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                call = PendingToolCall(
                    id=block.get("id") or "", name=block.get("name") or "", index=self._tool_count
                )
                self._tool_count += 1
                self._saw_calls = True
                self._calls[event.get("index", 0)] = call
                yield call.start()
            elif block.get("type") == "text" and block.get("text"):
                yield TextDelta(text=block["text"])
        elif kind == "content_block_stop":
            call = self._calls.pop(event.get("index", 0), None)
            if call is not None:
                yield call.end()
        elif kind == "message_start":
            message = event.get("message") or {}
            self._model = message.get("model") or None
            self._merge_usage(message.get("usage"))
        elif kind == "message_delta":
            self._stop = (event.get("delta") or {}).get("stop_reason") or self._stop
            self._merge_usage(event.get("usage"))
        elif kind == "message_stop":
            self._stopped = True
            for index in sorted(self._calls):
                yield self._calls[index].end()
            self._calls.clear()

    def _merge_usage(self, usage: Mapping[str, Any] | None) -> None:
        # message_delta counts are cumulative; a field it leaves out keeps message_start's value.
        for key, value in (usage or {}).items():
            if value is not None:
                self._usage[key] = value

    def finish(self) -> Iterator[StreamEvent]:
        """The closing events; :class:`StreamClosedError` if the stream never finished."""
        if not self._stopped:
            raise StreamClosedError(
                "anthropic stream ended before message_stop", provider="anthropic"
            )
        yield UsageEvent(usage=_usage(self._usage))
        yield Done(
            stop_reason=stop_reason(_STOP_REASONS, self._stop, has_calls=self._saw_calls),
            model=self._model,
        )
