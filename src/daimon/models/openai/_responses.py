"""The OpenAI Responses API wire format: requests, responses and stream events.

A conversation goes out as ``input`` items: messages (``system``, ``user`` with text and image
parts, ``assistant``), ``function_call`` items for an assistant turn's tool calls and
``function_call_output`` items for their results. An assistant turn's reasoning items (kept on
:attr:`Message.reasoning <daimon.core.messages.Message.reasoning>`, encrypted content included)
go back before the turn, as the API wants them beside the calls they led to.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.errors import ModelError, StreamClosedError
from daimon.core.events import Done, ReasoningEvent, StreamEvent, TextDelta, UsageEvent
from daimon.core.limits import Remaining
from daimon.core.messages import (
    AudioPart,
    CachePoint,
    ImagePart,
    MediaPart,
    Message,
    Reasoning,
    Role,
    TextPart,
    ToolCall,
)
from daimon.core.tools import ToolSpec
from daimon.kit.media import data_url, inline, stand_in, text_of, unsupported
from daimon.kit.sdk_support import tool_definition
from daimon.kit.streaming import PendingToolCall
from daimon.models.openai._mapping import document_text, image_url

__all__ = (
    "EventDecoder",
    "PROVIDER_FORMAT",
    "input_items",
    "request_body",
    "response_from_wire",
)

PROVIDER_FORMAT = "openai-responses"
"""What :attr:`Reasoning.provider` says for reasoning items in this wire format."""

_INCOMPLETE = {
    "max_output_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTER,
}
_TRANSIENT = ("server_error", "rate_limit", "overloaded")


def request_body(request: ChatRequest, *, provider: str = "openai") -> dict[str, Any]:
    """The JSON fields of a ``responses.create`` call but ``model``, ``stream`` and ``store``."""
    body: dict[str, Any] = {"input": input_items(request.messages, provider=provider)}
    if request.tools:
        body["tools"] = [_function_tool(spec) for spec in request.tools]
    if request.tool_choice is not None:
        choice = request.tool_choice
        known = choice in ("auto", "none", "required")
        body["tool_choice"] = choice if known else {"type": "function", "name": choice}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    if request.response_format is not None:
        fmt = request.response_format
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": fmt.name,
                "schema": dict(fmt.schema),
                "strict": fmt.strict,
            }
        }
    return body


def _function_tool(spec: ToolSpec) -> dict[str, Any]:
    """A function tool; no ``description`` for a tool without one (not ``""``)."""
    # The API's default is strict, which refuses most hand-written schemas.
    return {"type": "function", **tool_definition(spec, "parameters"), "strict": False}


def input_items(messages: Any, *, provider: str = "openai") -> list[dict[str, Any]]:
    """The ``input`` items of a conversation."""
    items: list[dict[str, Any]] = []
    for message in messages:
        items.extend(_items(message, provider))
    return items


def _items(message: Message, provider: str) -> Iterator[dict[str, Any]]:
    if message.role is Role.TOOL:
        # The wire format has no error flag: a failed tool's output says so itself.
        output = {"type": "function_call_output", "call_id": message.tool_call_id or ""}
        yield {**output, "output": _tool_output(message, provider)}
        return
    if message.role is Role.ASSISTANT:
        for reasoning in message.reasoning:
            if reasoning.provider == PROVIDER_FORMAT and reasoning.data:
                yield dict(reasoning.data)
        if message.text or not message.tool_calls:
            yield {"role": "assistant", "content": message.text}
        for call in message.tool_calls:
            yield {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments_json,
            }
        return
    if message.role is Role.USER and not isinstance(message.content, str):
        parts = [_part(p, provider) for p in message.content if not isinstance(p, CachePoint)]
        yield {"role": "user", "content": parts}
        return
    yield {"role": message.role.value, "content": message.text}


def _tool_output(message: Message, provider: str) -> Any:
    """A function call's output: its text, or text, images and files (audio as a stand-in)."""
    if not message.media:
        return message.text
    out: list[dict[str, Any]] = []
    if message.text:
        out.append({"type": "input_text", "text": message.text})
    for part in message.media:
        if isinstance(part, AudioPart):
            out.append({"type": "input_text", "text": stand_in(part)})
        else:
            out.append(_part(part, provider))
    return out


def _part(part: TextPart | MediaPart, provider: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "input_image", "image_url": image_url(part), "detail": "auto"}
    if isinstance(part, AudioPart):
        raise unsupported(provider, part, "the Responses API takes no audio input")
    text = text_of(part)
    if text is not None:
        return {"type": "input_text", "text": document_text(part, text)}
    found = inline(part)
    if found is not None:
        if found[0] != "application/pdf":
            raise unsupported(provider, part, f"files are PDF or text, not {found[0]!r}")
        return {
            "type": "input_file",
            "filename": part.name or "document.pdf",
            "file_data": data_url(part),
        }
    if part.is_text or part.media_type != "application/pdf":
        raise unsupported(provider, part, "only a PDF can be given by URL")
    return {"type": "input_file", "file_url": part.url}


# ---------------------------------------------------------------------------- responses


def usage_from_wire(usage: Mapping[str, Any] | None) -> Usage:
    """Tokens of one response: cache reads and writes among the input, reasoning the output."""
    if not usage:
        return Usage(requests=1)
    input_details = usage.get("input_tokens_details") or {}
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cached_tokens=input_details.get("cached_tokens") or 0,
        cache_write_tokens=input_details.get("cache_write_tokens") or 0,
        reasoning_tokens=reasoning,
        requests=1,
    )


def reasoning_from_wire(item: Mapping[str, Any]) -> Reasoning:
    """A reasoning output item, kept whole to be sent back (its status is output only)."""
    summary = [s.get("text") or "" for s in item.get("summary") or () if isinstance(s, Mapping)]
    data = {k: v for k, v in item.items() if k != "status" and v is not None}
    return Reasoning(provider=PROVIDER_FORMAT, text="\n\n".join(summary), data=data)


def _message_text(item: Mapping[str, Any]) -> str:
    pieces: list[str] = []
    for part in item.get("content") or ():
        if part.get("type") == "output_text":
            pieces.append(part.get("text") or "")
        elif part.get("type") == "refusal":
            pieces.append(part.get("refusal") or "")
    return "".join(pieces)


def _stop_reason(data: Mapping[str, Any], *, has_calls: bool) -> StopReason:
    if data.get("status") == "incomplete":
        reason = (data.get("incomplete_details") or {}).get("reason")
        return _INCOMPLETE.get(reason or "", StopReason.MAX_TOKENS)
    return StopReason.TOOL_USE if has_calls else StopReason.END_TURN


def failure(data: Mapping[str, Any], provider: str) -> ModelError:
    """The :class:`ModelError` for a failed response or an ``error`` stream event."""
    inner = data.get("error")
    error: Mapping[str, Any] = inner if isinstance(inner, Mapping) else data
    code = str(error.get("code") or error.get("type") or "")
    message = error.get("message") or "the response failed"
    return ModelError(
        f"{provider} failed: {message}" + (f" ({code})" if code else ""),
        retryable=any(word in code for word in _TRANSIENT),
        provider=provider,
    )


def response_from_wire(
    data: Mapping[str, Any], *, provider: str, rate_limits: Remaining | None = None
) -> ChatResponse:
    """A :class:`ChatResponse` from a ``response`` object (and its rate-limit headers)."""
    if data.get("status") == "failed":
        raise failure(data, provider)
    text: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    for item in data.get("output") or ():
        kind = item.get("type")
        if kind == "message":
            text.append(_message_text(item))
        elif kind == "function_call":
            call_id = item.get("call_id") or item.get("id") or f"call_{len(calls)}"
            calls.append(
                ToolCall.from_json(call_id, item.get("name") or "", item.get("arguments") or "")
            )
        elif kind == "reasoning":
            reasoning.append(reasoning_from_wire(item))
    return ChatResponse(
        message=Message.assistant("".join(text), calls, reasoning=reasoning),
        stop_reason=_stop_reason(data, has_calls=bool(calls)),
        usage=usage_from_wire(data.get("usage")),
        model=data.get("model") or None,
        rate_limits=rate_limits,
    )


class EventDecoder:
    """Turns Responses stream events into daimon stream events.

    A function call opens with ``response.output_item.added``, streams its arguments as
    ``response.function_call_arguments.delta`` and closes with ``response.output_item.done``;
    text comes as ``response.output_text.delta``; a reasoning item is kept when it is done. The
    stream ends with ``response.completed`` (or ``response.incomplete``); one that ends without
    either was cut short, and ``response.failed`` or ``error`` raise :class:`ModelError`.
    """

    __slots__ = ("_call_count", "_calls", "_end", "_model", "_provider")

    def __init__(self, *, provider: str) -> None:
        self._provider = provider
        self._calls: dict[str, PendingToolCall] = {}
        self._model: str | None = None
        self._end: Mapping[str, Any] | None = None
        self._call_count = 0

    def feed(self, event: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The daimon events one stream event carries."""
        kind = event.get("type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            if event.get("delta"):
                yield TextDelta(text=event["delta"])
        elif kind == "response.function_call_arguments.delta":
            call = self._calls.get(event.get("item_id") or "")
            if call is not None and event.get("delta"):
                yield call.add(event["delta"])
        elif kind == "response.output_item.added":
            yield from self._added(event.get("item") or {})
        elif kind == "response.output_item.done":
            yield from self._done(event.get("item") or {})
        elif kind in ("response.created", "response.in_progress"):
            self._model = (event.get("response") or {}).get("model") or self._model
        elif kind in ("response.completed", "response.incomplete"):
            self._end = event.get("response") or {}
        elif kind == "response.failed":
            raise failure(event.get("response") or {}, self._provider)
        elif kind == "error":
            raise failure(event, self._provider)

    def _added(self, item: Mapping[str, Any]) -> Iterator[StreamEvent]:
        if item.get("type") != "function_call":
            return
        call = PendingToolCall(
            id=item.get("call_id") or item.get("id") or f"call_{self._call_count}",
            name=item.get("name") or "",
            index=self._call_count,
        )
        self._call_count += 1
        self._calls[item.get("id") or call.id] = call
        yield call.start()
        if item.get("arguments"):
            yield call.add(item["arguments"])

    def _done(self, item: Mapping[str, Any]) -> Iterator[StreamEvent]:
        if item.get("type") == "reasoning":
            yield ReasoningEvent(reasoning=reasoning_from_wire(item))
            return
        if item.get("type") != "function_call":
            return
        call = self._calls.pop(item.get("id") or item.get("call_id") or "", None)
        if call is None:  # never announced: it arrives whole
            yield from self._added(item)
            call = self._calls.pop(item.get("id") or item.get("call_id") or "")
        whole = item.get("arguments")
        if isinstance(whole, str) and whole != "".join(call.arguments):
            call.arguments = [whole]  # the finished item is the authority
        yield call.end()

    def finish(self, rate_limits: Remaining | None = None) -> Iterator[StreamEvent]:
        """The closing events; :class:`StreamClosedError` if the response never completed."""
        end = self._end
        if end is None:
            raise StreamClosedError(
                f"{self._provider} stream ended before response.completed", provider=self._provider
            )
        for call in self._calls.values():  # calls the stream never closed
            yield call.end()
        yield UsageEvent(usage=usage_from_wire(end.get("usage")))
        stop = _stop_reason(end, has_calls=bool(self._call_count))
        yield Done(stop_reason=stop, model=end.get("model") or self._model, rate_limits=rate_limits)
