"""Chat Completions wire format: daimon requests to JSON, JSON responses and chunks to daimon.

Plain data both ways, plus the client plumbing; no SDK import. Only :mod:`daimon.models.openai`
uses it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.errors import ModelError, StreamClosedError
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
    MediaPart,
    Message,
    Role,
    TextPart,
    ToolCall,
)
from daimon.kit.media import b64, data_url, inline, stand_in, text_of, unsupported
from daimon.kit.sdk_support import stop_reason, tool_definition
from daimon.kit.streaming import PendingToolCall

__all__ = (
    "ChunkDecoder",
    "REQUEST_OPTIONS",
    "as_dict",
    "detail",
    "document_text",
    "image_url",
    "message_to_wire",
    "request_body",
    "response_from_wire",
)

REQUEST_OPTIONS = frozenset({"timeout", "extra_headers", "extra_query", "extra_body"})
"""Settings that are options of the SDK call rather than fields of the JSON body."""

_STOP_REASONS = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTER,
}


def request_body(
    request: ChatRequest, *, max_tokens_param: str, provider: str = "openai"
) -> dict[str, Any]:
    """The JSON fields of a Chat Completions request, apart from ``model`` and ``stream``."""
    body: dict[str, Any] = {
        "messages": [message_to_wire(m, provider=provider) for m in request.messages]
    }
    if request.tools:
        body["tools"] = [
            {"type": "function", "function": tool_definition(spec, "parameters")}
            for spec in request.tools
        ]
    if request.tool_choice is not None:
        body["tool_choice"] = _tool_choice(request.tool_choice)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body[max_tokens_param] = request.max_tokens
    if request.response_format is not None:
        fmt = request.response_format
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": fmt.name, "schema": dict(fmt.schema), "strict": fmt.strict},
        }
    return body


def _tool_choice(choice: str) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def message_to_wire(message: Message, *, provider: str = "openai") -> dict[str, Any]:
    """One message as a Chat Completions message."""
    if message.role is Role.TOOL:
        # Chat Completions has no error flag on tool results: the content says what went wrong.
        # Tool messages take text only: media a tool returned is named in a text stand-in.
        text = message.text
        if message.media:
            text = "\n".join([text, *(stand_in(p) for p in message.media)]).lstrip("\n")
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": text}
    if message.role is Role.ASSISTANT:
        # "" rather than null beside tool calls: OpenAI takes either, but compatible servers
        # (llama.cpp's among them) reject null.
        wire: dict[str, Any] = {"role": "assistant", "content": message.text}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
                for call in message.tool_calls
            ]
        return wire
    if message.role is Role.USER and not isinstance(message.content, str):
        parts = [_part(p, provider) for p in message.content if not isinstance(p, CachePoint)]
        return {"role": "user", "content": parts}
    return {"role": message.role.value, "content": message.text}


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _part(part: TextPart | MediaPart, provider: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": image_url(part)}}
    if isinstance(part, AudioPart):
        found = inline(part)
        if found is None:
            raise unsupported(provider, part, "audio must be inline (bytes or a data: URL)")
        audio_format = _AUDIO_FORMATS.get(found[0].lower())
        if audio_format is None:
            raise unsupported(provider, part, f"audio is wav or mp3, not {found[0]!r}")
        return {
            "type": "input_audio",
            "input_audio": {"data": b64(found[1]), "format": audio_format},
        }
    return _document(part, provider)


def _document(part: DocumentPart, provider: str) -> dict[str, Any]:
    text = text_of(part)
    if text is not None:  # Chat Completions files are PDFs: a text file goes as its text
        return {"type": "text", "text": document_text(part, text)}
    found = inline(part)
    if found is None or found[0] != "application/pdf":
        raise unsupported(
            provider, part, "documents are PDFs or text given inline (bytes or a data: URL)"
        )
    file = {"filename": part.name or "document.pdf", "file_data": data_url(part)}
    return {"type": "file", "file": file}


def document_text(part: DocumentPart, text: str) -> str:
    """A text document as the text a model reads, under its name when it has one."""
    return f"{part.name}:\n{text}" if part.name else text


def image_url(part: ImagePart) -> str:
    """The image's URL, or its bytes as a ``data:`` URL (both OpenAI APIs take either)."""
    url = data_url(part)
    assert url is not None
    return url


def response_from_wire(
    data: Mapping[str, Any], *, provider: str, rate_limits: Remaining | None = None
) -> ChatResponse:
    """A :class:`ChatResponse` from a ``chat.completion`` object (and its rate-limit headers)."""
    choices = data.get("choices") or []
    if not choices:
        raise ModelError(f"{provider} returned no choices", provider=provider)
    choice = choices[0]
    message = choice.get("message") or {}
    text = message.get("content") or message.get("refusal") or ""
    calls = [
        ToolCall.from_json(
            call.get("id") or f"call_{index}",
            (call.get("function") or {}).get("name") or "",
            (call.get("function") or {}).get("arguments") or "",
        )
        for index, call in enumerate(message.get("tool_calls") or [])
    ]
    return ChatResponse(
        message=Message.assistant(text, calls),
        stop_reason=stop_reason(_STOP_REASONS, choice.get("finish_reason"), has_calls=bool(calls)),
        usage=_usage(data.get("usage")),
        model=data.get("model") or None,
        rate_limits=rate_limits,
    )


def _usage(usage: Mapping[str, Any] | None) -> Usage:
    """Tokens of one completion; cache reads and writes are among the prompt tokens."""
    if not usage:
        return Usage(requests=1)
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=usage.get("prompt_tokens") or 0,
        output_tokens=usage.get("completion_tokens") or 0,
        cached_tokens=details.get("cached_tokens") or 0,
        cache_write_tokens=details.get("cache_write_tokens") or 0,
        requests=1,
    )


class ChunkDecoder:
    """Turns ``chat.completion.chunk`` objects into daimon stream events.

    Tool calls stream by ``index``: the first chunk of a call carries its id and name, later ones
    pieces of the arguments. Calls end (and are parsed) when the choice's ``finish_reason``
    arrives; a stream that ends without one was cut short.
    """

    __slots__ = ("_calls", "_finish", "_model", "_provider", "_saw_calls", "_usage")

    def __init__(self, *, provider: str) -> None:
        self._provider = provider
        self._calls: dict[int, PendingToolCall] = {}
        self._finish: str | None = None
        self._model: str | None = None
        self._usage: Usage | None = None
        self._saw_calls = False

    def feed(self, chunk: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The events one chunk carries."""
        if self._model is None and chunk.get("model"):
            self._model = chunk["model"]
        if chunk.get("usage"):
            self._usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield TextDelta(text=delta["content"])
            for piece in delta.get("tool_calls") or ():
                yield from self._tool_piece(piece)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                yield from self._end_calls()

    def _tool_piece(self, piece: Mapping[str, Any]) -> Iterator[StreamEvent]:
        index = piece.get("index")
        if not isinstance(index, int):
            index = len(self._calls)
        function = piece.get("function") or {}
        call = self._calls.get(index)
        if call is None:
            call = PendingToolCall(
                id=piece.get("id") or f"call_{index}", name=function.get("name") or "", index=index
            )
            self._calls[index] = call
            self._saw_calls = True
            yield call.start()
        elif function.get("name") and function["name"] != call.name:
            call.name += function["name"]
        if function.get("arguments"):
            yield call.add(function["arguments"])

    def _end_calls(self) -> Iterator[StreamEvent]:
        for index in sorted(self._calls):
            yield self._calls[index].end()
        self._calls.clear()

    def finish(self, rate_limits: Remaining | None = None) -> Iterator[StreamEvent]:
        """The closing events; :class:`StreamClosedError` if the stream never finished."""
        if self._finish is None:
            raise StreamClosedError(
                f"{self._provider} stream ended before its finish_reason", provider=self._provider
            )
        yield UsageEvent(usage=self._usage or Usage(requests=1))
        stop = stop_reason(_STOP_REASONS, self._finish, has_calls=self._saw_calls)
        yield Done(stop_reason=stop, model=self._model, rate_limits=rate_limits)


def as_dict(obj: Any) -> dict[str, Any]:
    """A plain dict of an SDK model (or mapping)."""
    if isinstance(obj, Mapping):
        return dict(obj)
    data: dict[str, Any] = obj.model_dump(warnings=False)
    return data


def detail(body: object) -> str | None:
    """The provider's own message in an error body."""
    if isinstance(body, Mapping):
        message = body.get("message") or body.get("error")
        return str(message) if message else None
    return body if isinstance(body, str) and body else None
