"""Messages API wire format: daimon requests to JSON, JSON responses and events to daimon.

Plain data both ways, plus the client plumbing; no SDK import. Only
:mod:`daimon.models.anthropic` uses it.
"""

from __future__ import annotations

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
from daimon.core.limits import Remaining
from daimon.core.messages import (
    AudioPart,
    CachePoint,
    DocumentPart,
    ImagePart,
    Message,
    Reasoning,
    Role,
    TextPart,
    ToolCall,
)
from daimon.core.tools import ToolSpec
from daimon.kit.media import (
    CacheMode,
    b64,
    has_cache_points,
    inline,
    stand_in,
    text_of,
    unsupported,
)
from daimon.kit.sdk_support import cache_exclusive_usage, stop_reason, tool_definition
from daimon.kit.streaming import PendingToolCall
from daimon.models.anthropic import _thinking

__all__ = (
    "EPHEMERAL",
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


def request_body(
    request: ChatRequest, *, max_tokens: int, cache: CacheMode = "auto"
) -> dict[str, Any]:
    """The JSON fields of a Messages request, apart from ``model`` and ``stream``.

    With ``cache="auto"`` and no hand-placed :class:`CachePoint`, ``cache_control`` breakpoints
    go on the last tool, the system text and the last block of the conversation (three of the
    four the API allows): the next call reads everything before its new turns from the cache.
    """
    marks = _Marks(cache, request.messages)
    system, system_marked = _system(request.messages, marks)
    body: dict[str, Any] = {
        "messages": messages_to_wire(request.messages, marks=marks),
        "max_tokens": request.max_tokens if request.max_tokens is not None else max_tokens,
    }
    if system:
        if marks.on:  # blocks, so a breakpoint can sit on them; the same form every turn
            block: dict[str, Any] = {"type": "text", "text": system}
            if system_marked or marks.auto:
                block["cache_control"] = dict(EPHEMERAL)
            body["system"] = [block]
        else:
            body["system"] = system
    if request.tools:
        tools = [_tool(spec) for spec in request.tools]
        if marks.auto:
            tools[-1]["cache_control"] = dict(EPHEMERAL)
        body["tools"] = tools
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


def _tool(spec: ToolSpec) -> dict[str, Any]:
    """A tool definition; a tool without a description goes without the field."""
    return tool_definition(spec, "input_schema")


EPHEMERAL: Mapping[str, str] = {"type": "ephemeral"}
"""The ``cache_control`` of a breakpoint (the default five-minute cache)."""


class _Marks:
    """Where breakpoints go: by hand (``CachePoint`` parts), automatically, or nowhere."""

    __slots__ = ("auto", "hand", "on")

    def __init__(self, cache: CacheMode, messages: Sequence[Message]) -> None:
        self.on = cache != "off"
        self.hand = self.on and has_cache_points(messages)
        self.auto = self.on and not self.hand


def _system(messages: Sequence[Message], marks: _Marks) -> tuple[str, bool]:
    """The system text, and whether a hand-placed breakpoint is on it."""
    texts = [m.text for m in messages if m.role is Role.SYSTEM]
    marked = marks.hand and any(
        isinstance(p, CachePoint)
        for m in messages
        if m.role is Role.SYSTEM and not isinstance(m.content, str)
        for p in m.content
    )
    return "\n\n".join(texts), marked


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


def messages_to_wire(
    messages: Sequence[Message], *, marks: _Marks | None = None
) -> list[dict[str, Any]]:
    """The conversation as Messages API turns (system messages go to the top-level ``system``).

    Tool results become ``tool_result`` blocks of a user turn; consecutive ones share one turn.
    """
    marks = marks or _Marks("off", messages)
    turns: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None
    for message in messages:
        if message.role is Role.TOOL:
            block = _tool_result(message)
            if results is None:
                results = []
                turns.append({"role": "user", "content": results})
            results.append(block)
            if marks.hand and _has_point(message):
                block["cache_control"] = dict(EPHEMERAL)
            continue
        results = None
        if message.role is Role.USER:
            turns.append({"role": "user", "content": _user_content(message, marks)})
        elif message.role is Role.ASSISTANT:
            blocks = _assistant_blocks(message)
            if blocks:  # the API rejects empty turns
                if marks.hand and _has_point(message):
                    blocks[-1]["cache_control"] = dict(EPHEMERAL)
                turns.append({"role": "assistant", "content": blocks})
    if marks.auto and turns:
        last = turns[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        if last["content"]:
            last["content"][-1]["cache_control"] = dict(EPHEMERAL)
    return turns


def _has_point(message: Message) -> bool:
    return not isinstance(message.content, str) and any(
        isinstance(p, CachePoint) for p in message.content
    )


def _user_content(message: Message, marks: _Marks) -> Any:
    content = message.content
    if isinstance(content, str):
        # With caching on, text goes as blocks every turn: a turn's form never depends on
        # whether a breakpoint is on it, so the prefix stays the same from call to call.
        return [{"type": "text", "text": content}] if marks.on and content else content
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, CachePoint):
            if marks.hand and blocks:
                blocks[-1]["cache_control"] = dict(EPHEMERAL)
            continue
        if not isinstance(part, TextPart) or part.text:  # the API refuses empty text blocks
            blocks.append(_part(part))
    return blocks


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = _thinking.to_wire(message)  # first: thinking comes before what it led to
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        arguments = call.arguments
        if isinstance(arguments, str):
            # The API wants an object: keep the model's unparseable text inside one.
            arguments = {"raw_arguments": arguments}
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def _tool_result(message: Message) -> dict[str, Any]:
    """A ``tool_result`` block: its text, with images and documents beside it."""
    content: Any = message.text
    if message.media:
        content = [{"type": "text", "text": message.text}] if message.text else []
        for part in message.media:
            if isinstance(part, AudioPart):  # tool results take text, images and documents
                content.append({"type": "text", "text": stand_in(part)})
            else:
                content.append(_part(part))
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
    if content:
        block["content"] = content
    if message.is_error:
        block["is_error"] = True
        block.setdefault("content", _SILENT_FAILURE)  # the API wants an error to say something
    return block


_SILENT_FAILURE = "Error: the tool failed without a message."
"""What a failed tool's result says when it said nothing."""


def _part(part: TextPart | ImagePart | AudioPart | DocumentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, AudioPart):
        raise unsupported("anthropic", part, "the Messages API takes no audio input")
    if isinstance(part, DocumentPart):
        return _document(part)
    found = inline(part)
    if found is not None:
        source = {"type": "base64", "media_type": found[0], "data": b64(found[1])}
    else:
        source = {"type": "url", "url": part.url or ""}
    return {"type": "image", "source": source}


def _document(part: DocumentPart) -> dict[str, Any]:
    if part.is_text:
        text = text_of(part)
        if text is None:
            raise unsupported(
                "anthropic", part, "a text document must be inline (bytes or a data: URL)"
            )
        source: dict[str, Any] = {"type": "text", "media_type": "text/plain", "data": text}
    elif part.media_type != "application/pdf":
        raise unsupported(
            "anthropic", part, f"documents are PDF or plain text, not {part.media_type!r}"
        )
    else:
        found = inline(part)
        if found is not None:
            source = {"type": "base64", "media_type": "application/pdf", "data": b64(found[1])}
        else:
            source = {"type": "url", "url": part.url or ""}
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.name:
        block["title"] = part.name
    return block


def response_from_wire(
    data: Mapping[str, Any], rate_limits: Remaining | None = None
) -> ChatResponse:
    """A :class:`ChatResponse` from a ``message`` object (and its rate-limit headers)."""
    text: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    for block in data.get("content") or ():
        if _thinking.is_thinking(block):
            reasoning.append(_thinking.reasoning_from_block(block))
        elif block.get("type") == "text":
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
        message=Message.assistant("".join(text), calls, reasoning=reasoning),
        stop_reason=stop_reason(_STOP_REASONS, data.get("stop_reason"), has_calls=bool(calls)),
        usage=_usage(data.get("usage")),
        model=data.get("model") or None,
        rate_limits=rate_limits,
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

    __slots__ = (
        "_calls",
        "_model",
        "_saw_calls",
        "_stop",
        "_stopped",
        "_thinking",
        "_tool_count",
        "_usage",
    )

    def __init__(self) -> None:
        self._calls: dict[int, PendingToolCall] = {}
        self._thinking = _thinking.ThinkingStream()
        self._tool_count = 0
        self._model: str | None = None
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self._stopped = False
        self._saw_calls = False

    def feed(self, event: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The events one stream event carries."""
        kind = event.get("type")
        index = event.get("index", 0)
        if kind == "content_block_delta":
            yield from self._delta(index, event.get("delta") or {})
        elif kind == "content_block_start":
            yield from self._block_start(index, event.get("content_block") or {})
        elif kind == "content_block_stop":
            yield from self._block_stop(index)
        elif kind == "message_start":
            message = event.get("message") or {}
            self._model = message.get("model") or None
            self._merge_usage(message.get("usage"))
        elif kind == "message_delta":
            self._stop = (event.get("delta") or {}).get("stop_reason") or self._stop
            self._merge_usage(event.get("usage"))
        elif kind == "message_stop":
            self._stopped = True
            for open_index in sorted(self._calls):
                yield self._calls[open_index].end()
            self._calls.clear()

    def _delta(self, index: int, delta: Mapping[str, Any]) -> Iterator[StreamEvent]:
        if delta.get("type") == "text_delta" and delta.get("text"):
            yield TextDelta(text=delta["text"])
        elif delta.get("type") == "input_json_delta" and delta.get("partial_json"):
            call = self._calls.get(index)
            if call is not None:
                yield call.add(delta["partial_json"])
        else:
            self._thinking.add(index, delta)

    def _block_start(self, index: int, block: Mapping[str, Any]) -> Iterator[StreamEvent]:
        if block.get("type") == "tool_use":
            call = PendingToolCall(
                id=block.get("id") or "", name=block.get("name") or "", index=self._tool_count
            )
            self._tool_count += 1
            self._saw_calls = True
            self._calls[index] = call
            yield call.start()
        elif block.get("type") == "text" and block.get("text"):
            yield TextDelta(text=block["text"])
        elif _thinking.is_thinking(block):
            self._thinking.start(index, block)

    def _block_stop(self, index: int) -> Iterator[StreamEvent]:
        call = self._calls.pop(index, None)
        if call is not None:
            yield call.end()
        thought = self._thinking.stop(index)
        if thought is not None:
            yield thought

    def _merge_usage(self, usage: Mapping[str, Any] | None) -> None:
        # message_delta counts are cumulative; a field it leaves out keeps message_start's value.
        for key, value in (usage or {}).items():
            if value is not None:
                self._usage[key] = value

    def finish(self, rate_limits: Remaining | None = None) -> Iterator[StreamEvent]:
        """The closing events; :class:`StreamClosedError` if the stream never finished."""
        if not self._stopped:
            raise StreamClosedError(
                "anthropic stream ended before message_stop", provider="anthropic"
            )
        yield UsageEvent(usage=_usage(self._usage))
        yield Done(
            stop_reason=stop_reason(_STOP_REASONS, self._stop, has_calls=self._saw_calls),
            model=self._model,
            rate_limits=rate_limits,
        )
