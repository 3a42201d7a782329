"""Gemini ``generateContent`` wire format: daimon requests to SDK dicts, responses to daimon.

Plain data both ways (the SDK's snake_case field names), plus the client plumbing; no SDK
import. Only :mod:`daimon.models.gemini` uses it.

Tool-call ids: Gemini gives a ``functionCall`` an ``id`` only on some models and APIs. A call
without one gets a synthesized id (``gemini_<hex>``), unique and the same in every event of the
stream and in the final response; it is never sent back to the API, which matches a
``functionResponse`` to its call by function name and position instead. So tool results are sent
in the order of the calls they answer.

Thought signatures: a part may carry a ``thoughtSignature`` that must go back unchanged on the same
part (Gemini 3 refuses a tool turn whose function calls come back without theirs). Each becomes a
:class:`~daimon.core.messages.Reasoning` of the assistant message, ``provider="gemini"``, with
``data={"thought_signature": <base64>, "call_id": <the call's id>}`` for a function call's part
and no ``call_id`` for a text part's; it goes back on that call's part, or on the turn's text.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.errors import ModelError, StreamClosedError
from daimon.core.events import (
    Done,
    ReasoningEvent,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from daimon.core.messages import (
    CachePoint,
    MediaPart,
    Message,
    Reasoning,
    Role,
    TextPart,
    ToolCall,
)
from daimon.kit.media import inline, stand_in
from daimon.kit.sdk_support import stop_reason, tool_definition

__all__ = (
    "ChunkDecoder",
    "PROVIDER_FORMAT",
    "REQUEST_OPTIONS",
    "contents_to_wire",
    "new_call_id",
    "request_config",
    "response_from_wire",
    "retry_delay",
)

REQUEST_OPTIONS = frozenset({"timeout", "extra_headers", "extra_body"})
"""Settings that are HTTP options of the call rather than fields of the request."""

PROVIDER_FORMAT = "gemini"
"""What :attr:`Reasoning.provider` says for thought signatures in this wire format."""

SYNTHETIC_PREFIX = "gemini_"
"""Ids daimon made up for calls the API gave none; they are never sent back."""

_STOP_REASONS = {
    "STOP": StopReason.END_TURN,
    "MAX_TOKENS": StopReason.MAX_TOKENS,
    "CONTINUATION": StopReason.MAX_TOKENS,
    "SAFETY": StopReason.CONTENT_FILTER,
    "RECITATION": StopReason.CONTENT_FILTER,
    "LANGUAGE": StopReason.CONTENT_FILTER,
    "BLOCKLIST": StopReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": StopReason.CONTENT_FILTER,
    "SPII": StopReason.CONTENT_FILTER,
    "IMAGE_SAFETY": StopReason.CONTENT_FILTER,
    "IMAGE_PROHIBITED_CONTENT": StopReason.CONTENT_FILTER,
    "IMAGE_RECITATION": StopReason.CONTENT_FILTER,
    "MODEL_ARMOR": StopReason.CONTENT_FILTER,
    "ESCALATION": StopReason.CONTENT_FILTER,
}

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)s\s*$")


# ---------------------------------------------------------------- call ids
def new_call_id() -> str:
    """A fresh id for a call the API sent without one."""
    return f"{SYNTHETIC_PREFIX}{uuid.uuid4().hex[:24]}"


def _api_id(call_id: str) -> str | None:
    """The id to send back for a call: the API's own, ``None`` for a synthesized one."""
    return None if not call_id or call_id.startswith(SYNTHETIC_PREFIX) else call_id


# ---------------------------------------------------------------- thought signatures
def _signature_text(value: Any) -> str | None:
    """A part's ``thought_signature`` as base64 text (the SDK gives bytes, JSON gives text)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii") if value else None
    return value if isinstance(value, str) and value else None


def _signed(part: Mapping[str, Any], call: ToolCall | None) -> Reasoning | None:
    """The :class:`Reasoning` keeping a part's thought signature, or ``None`` if it has none."""
    signature = _signature_text(part.get("thought_signature"))
    if signature is None:
        return None
    data: dict[str, Any] = {"thought_signature": signature}
    if call is not None:
        data["call_id"] = call.id
    text = (part.get("text") or "") if part.get("thought") else ""
    return Reasoning(provider=PROVIDER_FORMAT, text=text, data=data)


def _decoded(signature: Any) -> bytes | None:
    """A stored signature's bytes (standard or URL-safe base64); ``None`` if it is not base64."""
    if not isinstance(signature, str) or not signature:
        return None
    text = signature.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _signatures(message: Message) -> tuple[dict[str, bytes], bytes | None]:
    """The thought signatures of an assistant turn: by call id, and the text part's."""
    by_call: dict[str, bytes] = {}
    text: bytes | None = None
    for reasoning in message.reasoning:
        if reasoning.provider != PROVIDER_FORMAT:
            continue  # another provider's: Gemini cannot read it
        decoded = _decoded(reasoning.data.get("thought_signature"))
        if decoded is None:
            continue
        call = reasoning.data.get("call_id")
        if isinstance(call, str):
            by_call.setdefault(call, decoded)
        elif text is None:
            text = decoded
    return by_call, text


# ---------------------------------------------------------------- requests
def contents_to_wire(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the ``contents`` of a request.

    Consecutive tool results become one ``user`` turn of ``function_response`` parts, in the
    order of the calls they answer; turns of the same role are merged, as Gemini alternates them.
    """
    system = "\n\n".join(m.text for m in messages if m.role is Role.SYSTEM and m.text)
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    order: dict[str, int] = {}
    results: list[tuple[int, dict[str, Any]]] = []

    def flush() -> None:
        if results:
            results.sort(key=lambda item: item[0])
            _append(contents, "user", [part for _, part in results])
            results.clear()

    for message in messages:
        if message.role is Role.SYSTEM:
            continue
        if message.role is Role.TOOL:
            key = message.tool_call_id or ""
            results.append((order.get(key, len(order) + len(results)), _result(message, names)))
            continue
        flush()
        if message.role is Role.USER:
            _append(contents, "user", _user_parts(message))
        elif message.role is Role.ASSISTANT:
            order.clear()
            for position, call in enumerate(message.tool_calls):
                names[call.id] = call.name
                order[call.id] = position
            _append(contents, "model", _model_parts(message))  # none: Gemini refuses the turn
    flush()
    return system, contents


def _append(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _user_parts(message: Message) -> list[dict[str, Any]]:
    """A user turn's parts; empty text parts are left out (Gemini refuses an empty ``text``)."""
    if isinstance(message.content, str):
        return [{"text": message.content}] if message.content else []
    return [
        _part(p)
        for p in message.content
        if not isinstance(p, CachePoint) and not (isinstance(p, TextPart) and not p.text)
    ]


def _part(part: TextPart | MediaPart) -> dict[str, Any]:
    """A text part, or media (images, audio, PDFs, text files) as ``inline_data``/``file_data``."""
    if isinstance(part, TextPart):
        return {"text": part.text}
    found = inline(part)
    if found is not None:
        return {"inline_data": {"mime_type": found[0], "data": found[1]}}
    return {"file_data": {"mime_type": part.media_type, "file_uri": part.url or ""}}


def _model_parts(message: Message) -> list[dict[str, Any]]:
    """An assistant turn's parts: its text, then its calls, each with its thought signature."""
    by_call, text_signature = _signatures(message)
    parts: list[dict[str, Any]] = []
    if message.text:
        parts.append({"text": message.text})
        if text_signature is not None:
            parts[0]["thought_signature"] = text_signature
    for call in message.tool_calls:
        part = _call_part(call)
        if call.id in by_call:
            part["thought_signature"] = by_call[call.id]
        parts.append(part)
    return parts


def _call_part(call: ToolCall) -> dict[str, Any]:
    api_id = _api_id(call.id)
    arguments = call.arguments
    if isinstance(arguments, str):
        # ``args`` must be an object: keep the model's unparseable text inside one.
        arguments = {"raw_arguments": arguments}
    function_call: dict[str, Any] = {"name": call.name, "args": arguments}
    if api_id is not None:
        function_call["id"] = api_id
    return {"function_call": function_call}


def _result(message: Message, names: Mapping[str, str]) -> dict[str, Any]:
    key = message.tool_call_id or ""
    api_id = _api_id(key)
    # Gemini's documented keys: "output" for a result, "error" for a failure. Media a tool
    # returned is named in a text stand-in (function responses hold JSON here).
    text = message.text
    if message.media:
        text = "\n".join([text, *(stand_in(p) for p in message.media)]).lstrip("\n")
    response = {"error": text} if message.is_error else {"output": text}
    function_response: dict[str, Any] = {
        "name": message.name or names.get(key, ""),
        "response": response,
    }
    if api_id is not None:
        function_response["id"] = api_id
    return {"function_response": function_response}


def request_config(request: ChatRequest, system: str) -> dict[str, Any]:
    """The ``config`` of a ``generate_content`` call, apart from settings."""
    config: dict[str, Any] = {}
    if system:
        config["system_instruction"] = {"parts": [{"text": system}]}
    if request.tools:
        declarations = [tool_definition(spec, "parameters_json_schema") for spec in request.tools]
        config["tools"] = [{"function_declarations": declarations}]
    if request.tool_choice is not None:
        config["tool_config"] = {"function_calling_config": _tool_choice(request.tool_choice)}
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.max_tokens is not None:
        config["max_output_tokens"] = request.max_tokens
    if request.response_format is not None:
        config["response_mime_type"] = "application/json"
        config["response_json_schema"] = dict(request.response_format.schema)
    return config


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice == "auto":
        return {"mode": "AUTO"}
    if choice == "none":
        return {"mode": "NONE"}
    if choice == "required":
        return {"mode": "ANY"}
    return {"mode": "ANY", "allowed_function_names": [choice]}


# ---------------------------------------------------------------- responses
def response_from_wire(data: Mapping[str, Any], *, provider: str) -> ChatResponse:
    """A :class:`ChatResponse` from a ``GenerateContentResponse`` dict."""
    usage = _usage(data.get("usage_metadata"))
    model = data.get("model_version") or None
    candidates = data.get("candidates") or []
    if not candidates:
        if (data.get("prompt_feedback") or {}).get("block_reason"):
            return ChatResponse(
                message=Message.assistant(""),
                stop_reason=StopReason.CONTENT_FILTER,
                usage=usage,
                model=model,
            )
        raise ModelError(f"{provider} returned no candidates", provider=provider)
    candidate = candidates[0]
    text: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    for part in (candidate.get("content") or {}).get("parts") or ():
        answer, call, signed = _read(part)
        text.append(answer)
        if call is not None:
            calls.append(call)
        if signed is not None:
            reasoning.append(signed)
    return ChatResponse(
        message=Message.assistant("".join(text), calls, reasoning=reasoning),
        stop_reason=stop_reason(
            _STOP_REASONS, _enum(candidate.get("finish_reason")).upper(), has_calls=bool(calls)
        ),
        usage=usage,
        model=model,
    )


def _read(part: Mapping[str, Any]) -> tuple[str, ToolCall | None, Reasoning | None]:
    """A response part's answer text (not thoughts), function call and thought signature."""
    call = _call(part["function_call"]) if part.get("function_call") else None
    text = "" if call is not None or part.get("thought") else part.get("text") or ""
    return text, call, _signed(part, call)


def _call(function_call: Mapping[str, Any]) -> ToolCall:
    arguments = function_call.get("args")
    return ToolCall(
        id=function_call.get("id") or new_call_id(),
        name=function_call.get("name") or "",
        arguments=dict(arguments) if isinstance(arguments, Mapping) else {},
    )


def _enum(value: Any) -> str:
    return str(getattr(value, "value", value) or "")


def _usage(usage: Mapping[str, Any] | None) -> Usage:
    """Usage from ``usageMetadata``, whose prompt count already includes cached tokens.

    Gemini reports cache reads (``cachedContentTokenCount``, implicit or explicit caching) and
    no cache writes: storing explicit cached content is billed per hour, not per token.
    """
    if not usage:
        return Usage(requests=1)
    return Usage(
        input_tokens=(usage.get("prompt_token_count") or 0)
        + (usage.get("tool_use_prompt_token_count") or 0),
        # Thinking tokens are billed as output.
        output_tokens=(usage.get("candidates_token_count") or 0)
        + (usage.get("thoughts_token_count") or 0),
        cached_tokens=usage.get("cached_content_token_count") or 0,
        requests=1,
    )


class ChunkDecoder:
    """Turns streamed ``GenerateContentResponse`` chunks into daimon stream events.

    Gemini streams text in pieces but each function call whole: a call becomes a start, one
    delta with all of its arguments, and an end, at once. A stream that ends before a chunk with a
    ``finish_reason`` (or a blocked prompt) was cut short.
    """

    __slots__ = ("_calls", "_finish", "_model", "_provider", "_usage", "received")

    def __init__(self, *, provider: str) -> None:
        self._provider = provider
        self._calls = 0
        self._finish: str | None = None
        self._model: str | None = None
        self._usage: Mapping[str, Any] | None = None
        self.received = False
        """Whether any chunk arrived."""

    def feed(self, chunk: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The events one chunk carries."""
        self.received = True
        if self._model is None and chunk.get("model_version"):
            self._model = chunk["model_version"]
        if chunk.get("usage_metadata"):
            self._usage = chunk["usage_metadata"]
        candidates = chunk.get("candidates") or []
        if not candidates:
            if (chunk.get("prompt_feedback") or {}).get("block_reason"):
                self._finish = "SAFETY"
            return
        candidate = candidates[0]
        for part in (candidate.get("content") or {}).get("parts") or ():
            yield from self._part(part)
        if candidate.get("finish_reason"):
            self._finish = _enum(candidate["finish_reason"])

    def _part(self, part: Mapping[str, Any]) -> Iterator[StreamEvent]:
        text, call, signed = _read(part)
        if text:
            yield TextDelta(text=text)
        if call is not None:
            index = self._calls
            self._calls += 1
            yield ToolCallStart(call_id=call.id, name=call.name, index=index)
            yield ToolCallDelta(call_id=call.id, arguments_delta=call.arguments_json, index=index)
            yield ToolCallEnd(call=call, index=index)
        if signed is not None:
            yield ReasoningEvent(reasoning=signed)

    def finish(self) -> Iterator[StreamEvent]:
        """The closing events; :class:`StreamClosedError` if the stream never finished."""
        if self._finish is None:
            raise StreamClosedError(
                f"{self._provider} stream ended before its finish_reason", provider=self._provider
            )
        yield UsageEvent(usage=_usage(self._usage))
        yield Done(
            stop_reason=stop_reason(
                _STOP_REASONS, _enum(self._finish).upper(), has_calls=self._calls > 0
            ),
            model=self._model,
        )


# ---------------------------------------------------------------- errors
def retry_delay(body: Any) -> float | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail of an error body (``"retryDelay": "7s"``)."""
    error = body.get("error", body) if isinstance(body, Mapping) else None
    details = error.get("details") if isinstance(error, Mapping) else None
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, Mapping) and str(detail.get("@type", "")).endswith("RetryInfo"):
            match = _DURATION.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match[1])
    return None


# ---------------------------------------------------------------- clients
