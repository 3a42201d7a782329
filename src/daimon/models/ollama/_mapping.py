"""Ollama ``/api/chat`` wire format: daimon requests to chat arguments, responses to daimon.

Plain data both ways, plus the client plumbing; no SDK import. Only :mod:`daimon.models.ollama`
uses it.

Tool-call ids: Ollama's calls carry none. Each call gets a synthesized id (``call_<hex>``), the
same in every event of a stream and in the final response; Ollama matches a tool result to its
call by the tool's name (``tool_name``) and position, so tool results are sent in the order of the
calls they answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.errors import StreamClosedError
from daimon.core.events import (
    Done,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from daimon.core.messages import (
    AudioPart,
    ContentPart,
    DocumentPart,
    ImagePart,
    Message,
    Role,
    TextPart,
    ToolCall,
)
from daimon.kit.media import inline, stand_in, text_of, unsupported
from daimon.kit.sdk_support import stop_reason, tool_definition

__all__ = (
    "CHAT_ARGUMENTS",
    "ChunkDecoder",
    "chat_arguments",
    "messages_to_wire",
    "new_call_id",
    "response_from_wire",
)

CHAT_ARGUMENTS = frozenset({"think", "keep_alive", "logprobs", "top_logprobs", "format"})
"""Settings that are arguments of ``AsyncClient.chat`` rather than model ``options``."""

_STOP_REASONS = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
}


def new_call_id() -> str:
    """A fresh id for a call (Ollama gives none)."""
    return f"call_{uuid.uuid4().hex[:24]}"


# ---------------------------------------------------------------- requests
def chat_arguments(request: ChatRequest) -> dict[str, Any]:
    """The ``AsyncClient.chat`` arguments for ``request``, apart from ``model`` and settings.

    Ollama has no tool choice: ``"none"`` sends no tools and a tool name sends that tool alone;
    ``"required"`` cannot be enforced and sends them all.
    """
    arguments: dict[str, Any] = {"messages": messages_to_wire(request.messages)}
    specs = list(request.tools)
    if request.tool_choice == "none":
        specs = []
    elif request.tool_choice not in (None, "auto", "required"):
        specs = [spec for spec in specs if spec.name == request.tool_choice]
    if specs:
        arguments["tools"] = [
            {"type": "function", "function": tool_definition(spec, "parameters")} for spec in specs
        ]
    options: dict[str, Any] = {}
    if request.temperature is not None:
        options["temperature"] = request.temperature
    if request.max_tokens is not None:
        options["num_predict"] = request.max_tokens
    if options:
        arguments["options"] = options
    if request.response_format is not None:
        arguments["format"] = dict(request.response_format.schema)
    return arguments


def messages_to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as ``/api/chat`` messages.

    Tool results name their tool (``tool_name``) and follow the order of the calls they answer;
    Ollama has no error flag, so a failed tool's text says so itself.
    """
    wire: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    order: dict[str, int] = {}
    results: list[tuple[int, dict[str, Any]]] = []

    def flush() -> None:
        results.sort(key=lambda item: item[0])
        wire.extend(message for _, message in results)
        results.clear()

    for message in messages:
        if message.role is Role.TOOL:
            key = message.tool_call_id or ""
            result: dict[str, Any] = {
                "role": "tool",
                "content": _tool_text(message),
                "tool_name": message.name or names.get(key, ""),
            }
            images = [_image(p) for p in message.media if isinstance(p, ImagePart)]
            if images:
                result["images"] = images
            results.append((order.get(key, len(order) + len(results)), result))
            continue
        flush()
        if message.role is Role.ASSISTANT:
            entry: dict[str, Any] = {"role": "assistant", "content": message.text}
            order.clear()
            if message.tool_calls:
                entry["tool_calls"] = []
                for position, call in enumerate(message.tool_calls):
                    names[call.id] = call.name
                    order[call.id] = position
                    arguments = call.arguments
                    if isinstance(arguments, str):
                        # Ollama wants an object: keep the model's unparseable text inside one.
                        arguments = {"raw_arguments": arguments}
                    entry["tool_calls"].append(
                        {"function": {"name": call.name, "arguments": arguments}}
                    )
            wire.append(entry)
        elif message.role is Role.USER and not isinstance(message.content, str):
            entry = {"role": "user", "content": _user_text(message.content)}
            images = [_image(p) for p in message.content if isinstance(p, ImagePart)]
            if images:
                entry["images"] = images
            wire.append(entry)
        else:
            wire.append({"role": message.role.value, "content": message.text})
    flush()
    return wire


def _user_text(parts: Sequence[ContentPart]) -> str:
    """A user message's text: its text parts, and text documents in place; images go apart."""
    pieces: list[str] = []
    for part in parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, AudioPart):
            raise unsupported("ollama", part, "/api/chat takes no audio")
        elif isinstance(part, DocumentPart):
            text = text_of(part)
            if text is None:
                raise unsupported(
                    "ollama", part, "/api/chat takes text documents given inline, not PDFs or URLs"
                )
            pieces.append(f"{part.name}:\n{text}" if part.name else text)
    return "".join(pieces)


def _tool_text(message: Message) -> str:
    """A tool result's text; media other than images is named in a stand-in."""
    others = [stand_in(p) for p in message.media if not isinstance(p, ImagePart)]
    return "\n".join([message.text, *others]).lstrip("\n") if others else message.text


def _image(part: ImagePart) -> bytes:
    found = inline(part)
    if found is not None:
        return found[1]
    url = part.url or ""
    raise unsupported(
        "ollama",
        part,
        f"/api/chat cannot fetch image URLs ({url[:60]!r}): give bytes or a data: URL",
    )


# ---------------------------------------------------------------- responses
def _calls(message: Mapping[str, Any]) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for wire in message.get("tool_calls") or ():
        function = wire.get("function") or {}
        name = function.get("name") or ""
        arguments = function.get("arguments")
        if isinstance(arguments, Mapping):
            calls.append(ToolCall(id=new_call_id(), name=name, arguments=dict(arguments)))
        else:
            calls.append(ToolCall.from_json(new_call_id(), name, str(arguments or "")))
    return calls


def response_from_wire(data: Mapping[str, Any]) -> ChatResponse:
    """A :class:`ChatResponse` from a ``/api/chat`` response (``stream: false``)."""
    message = data.get("message") or {}
    calls = _calls(message)
    return ChatResponse(
        message=Message.assistant(message.get("content") or "", calls),
        stop_reason=stop_reason(_STOP_REASONS, data.get("done_reason"), has_calls=bool(calls)),
        usage=_usage(data),
        model=data.get("model") or None,
    )


def _usage(data: Mapping[str, Any]) -> Usage:
    # Ollama reports no prompt-cache hits: cached_tokens stays 0 (and local models cost nothing).
    return Usage(
        input_tokens=data.get("prompt_eval_count") or 0,
        output_tokens=data.get("eval_count") or 0,
        requests=1,
    )


class ChunkDecoder:
    """Turns ``/api/chat`` NDJSON chunks into daimon stream events.

    Text streams in pieces; each tool call arrives whole, and becomes a start, one delta with all
    of its arguments, and an end, at once. The last chunk says ``"done": true``; a stream that
    ends without it was cut short.
    """

    __slots__ = ("_calls", "_done", "_model", "received")

    def __init__(self) -> None:
        self._calls = 0
        self._done: Mapping[str, Any] | None = None
        self._model: str | None = None
        self.received = False
        """Whether any chunk arrived."""

    def feed(self, chunk: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The events one chunk carries."""
        self.received = True
        if self._model is None and chunk.get("model"):
            self._model = chunk["model"]
        message = chunk.get("message") or {}
        if message.get("content"):
            yield TextDelta(text=message["content"])
        for call in _calls(message):
            index = self._calls
            self._calls += 1
            yield ToolCallStart(call_id=call.id, name=call.name, index=index)
            yield ToolCallDelta(call_id=call.id, arguments_delta=call.arguments_json, index=index)
            yield ToolCallEnd(call=call, index=index)
        if chunk.get("done"):
            self._done = chunk

    def finish(self) -> Iterator[StreamEvent]:
        """The closing events; :class:`StreamClosedError` if the stream never finished."""
        if self._done is None:
            raise StreamClosedError("ollama stream ended before its final chunk", provider="ollama")
        yield UsageEvent(usage=_usage(self._done))
        stop = stop_reason(_STOP_REASONS, self._done.get("done_reason"), has_calls=self._calls > 0)
        yield Done(stop_reason=stop, model=self._model)


# ---------------------------------------------------------------- errors
