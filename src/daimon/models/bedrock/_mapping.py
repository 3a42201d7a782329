"""Bedrock Converse wire format: daimon requests to Converse parameters, responses to daimon.

Plain data both ways (the shapes ``botocore`` takes and returns), plus the client plumbing; no SDK
import. Only :mod:`daimon.models.bedrock` uses it.
"""

from __future__ import annotations

import json
import re
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
from daimon.core.messages import (
    AudioPart,
    CachePoint,
    ContentPart,
    DocumentPart,
    MediaPart,
    Message,
    Reasoning,
    Role,
    TextPart,
    ToolCall,
)
from daimon.core.tools import ToolSpec
from daimon.kit.media import CacheMode, has_cache_points, inline, stand_in, unsupported
from daimon.kit.sdk_support import cache_exclusive_usage, stop_reason, tool_definition
from daimon.kit.streaming import PendingToolCall
from daimon.models.bedrock import _reasoning

__all__ = (
    "CACHE_POINT",
    "ERROR_STATUS",
    "EventDecoder",
    "MERGED_FIELDS",
    "RETRYABLE_ERRORS",
    "caches_prompts",
    "messages_to_wire",
    "request_params",
    "response_from_wire",
)

MERGED_FIELDS = frozenset({"inferenceConfig", "outputConfig", "additionalModelRequestFields"})
"""Converse fields a setting is merged into rather than replacing what daimon sends."""

_STOP_REASONS = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "guardrail_intervened": StopReason.CONTENT_FILTER,
    "content_filtered": StopReason.CONTENT_FILTER,
}

ERROR_STATUS = {
    "validationexception": 400,
    "servicequotaexceededexception": 400,
    "unrecognizedclientexception": 403,
    "accessdeniedexception": 403,
    "resourcenotfoundexception": 404,
    "modeltimeoutexception": 408,
    "modelerrorexception": 424,
    "modelstreamerrorexception": 424,
    "throttlingexception": 429,
    "modelnotreadyexception": 429,
    "internalserverexception": 500,
    "serviceunavailableexception": 503,
}
"""The HTTP status each Bedrock error code stands for (lower-cased), for errors that arrive inside
an event stream, where there is no status."""

RETRYABLE_ERRORS = frozenset(
    {
        "throttlingexception",
        "serviceunavailableexception",
        "modelnotreadyexception",
        "internalserverexception",
        "modeltimeoutexception",
        "modelstreamerrorexception",
    }
)
"""Error codes (lower-cased) worth retrying whatever their status."""

_DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/html": "html",
    "text/csv": "csv",
}
_NAME_CHARS = re.compile(r"[^A-Za-z0-9\s\-()\[\]]")

_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


# ---------------------------------------------------------------- requests
CACHE_POINT: Mapping[str, Any] = {"cachePoint": {"type": "default"}}
"""A Converse prompt-cache checkpoint block."""

_CACHING_MODELS = re.compile(
    r"\b(?:"
    r"anthropic\.claude-(?:opus|sonnet|haiku)-\d"  # Claude Opus/Sonnet 4 and Haiku 4.5 on
    r"|anthropic\.claude-3-7-sonnet"
    r"|anthropic\.claude-3-5-haiku"
    r"|amazon\.nova-(?:micro|lite|pro|premier)"
    r")",
    re.IGNORECASE,
)
"""The models AWS documents as taking prompt-cache checkpoints (Bedrock user guide, "Prompt
caching", supported models), matched in a model id, inference-profile id or ARN. Claude 3.5
Sonnet v2 caches only for accounts of its preview, so it is not among them."""


def caches_prompts(model_id: str) -> bool:
    """Whether Bedrock documents prompt caching for ``model_id``."""
    return _CACHING_MODELS.search(model_id) is not None


def request_params(
    request: ChatRequest, *, cache: CacheMode = "off", cache_tools: bool = False
) -> dict[str, Any]:
    """The Converse parameters for ``request``, apart from ``modelId`` and settings.

    With ``cache="auto"`` and no hand-placed :class:`CachePoint`, ``cachePoint`` blocks follow
    the tools (when ``cache_tools``: Claude takes them there, Nova does not), the system blocks
    and the last turn of the conversation.
    """
    hand = cache != "off" and has_cache_points(request.messages)
    auto = cache != "off" and not hand
    system, messages = messages_to_wire(request.messages, cache_points=hand)
    if auto and messages:
        messages[-1]["content"].append(dict(CACHE_POINT))
    params: dict[str, Any] = {"messages": messages}
    if system:
        params["system"] = [*system, dict(CACHE_POINT)] if auto else system
    inference: dict[str, Any] = {}
    if request.max_tokens is not None:
        inference["maxTokens"] = request.max_tokens
    if request.temperature is not None:
        inference["temperature"] = request.temperature
    if inference:
        params["inferenceConfig"] = inference
    if request.tools and not (request.tool_choice == "none" and not _uses_tools(messages)):
        tool_config: dict[str, Any] = {"tools": [_tool(spec) for spec in request.tools]}
        if auto and cache_tools:
            tool_config["tools"].append(dict(CACHE_POINT))
        choice = _tool_choice(request.tool_choice)
        if choice is not None:
            tool_config["toolChoice"] = choice
        params["toolConfig"] = tool_config
    if request.response_format is not None:
        fmt = request.response_format
        schema = {"schema": json.dumps(dict(fmt.schema)), "name": fmt.name}
        params["outputConfig"] = {
            "textFormat": {"type": "json_schema", "structure": {"jsonSchema": schema}}
        }
    return params


def _tool(spec: ToolSpec) -> dict[str, Any]:
    """A ``toolSpec``; without a description when there is none (Converse wants 1+ characters)."""
    return {"toolSpec": tool_definition(spec, "inputSchema", {"json": dict(spec.parameters)})}


def _uses_tools(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(
        "toolUse" in block or "toolResult" in block
        for message in messages
        for block in message["content"]
    )


def _tool_choice(choice: str | None) -> dict[str, Any] | None:
    # Converse has no "none": the tools are left out instead, unless the conversation already
    # holds tool blocks (Converse then insists on the tool specs) and the model decides.
    if choice is None or choice == "none":
        return None
    if choice == "auto":
        return {"auto": {}}
    if choice == "required":
        return {"any": {}}
    return {"tool": {"name": choice}}


def messages_to_wire(
    messages: Sequence[Message], *, cache_points: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``system`` blocks and the ``messages`` of a Converse request.

    Tool results become ``toolResult`` blocks of a user turn; turns of the same role are merged
    (Converse wants them alternating) and empty text blocks are dropped (Converse refuses them).
    With ``cache_points``, hand-placed :class:`CachePoint` parts become ``cachePoint`` blocks.
    """
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            if message.text:
                system.append({"text": message.text})
            if cache_points and _has_point(message):
                system.append(dict(CACHE_POINT))
            continue
        if message.role is Role.TOOL:
            _append(turns, "user", [{"toolResult": _tool_result(message)}])
            if cache_points and _has_point(message):
                _append(turns, "user", [dict(CACHE_POINT)])
        elif message.role is Role.USER:
            content = message.content
            if isinstance(content, str):
                _append(turns, "user", [{"text": content}] if content else [])
            else:
                _append(turns, "user", _user_blocks(content, cache_points))
        elif message.role is Role.ASSISTANT:
            blocks = _reasoning.to_wire(message)  # first: reasoning comes before what it led to
            if message.text:
                blocks.append({"text": message.text})
            for call in message.tool_calls:
                arguments = call.arguments
                if isinstance(arguments, str):
                    # ``input`` must be an object: keep the model's unparseable text inside one.
                    arguments = {"raw_arguments": arguments}
                blocks.append(
                    {"toolUse": {"toolUseId": call.id, "name": call.name, "input": arguments}}
                )
            if cache_points and blocks and _has_point(message):
                blocks.append(dict(CACHE_POINT))
            _append(turns, "assistant", blocks)
    return system, turns


def _has_point(message: Message) -> bool:
    return not isinstance(message.content, str) and any(
        isinstance(p, CachePoint) for p in message.content
    )


def _user_blocks(content: Sequence[ContentPart], cache_points: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, CachePoint):
            if cache_points and blocks:
                blocks.append(dict(CACHE_POINT))
        elif not isinstance(part, TextPart) or part.text:
            blocks.append(_block(part))
    return blocks


def _tool_result(message: Message) -> dict[str, Any]:
    """A ``toolResult``: its text, then images and documents (audio as a text stand-in)."""
    content: list[dict[str, Any]] = [{"text": message.text}] if message.text else []
    for part in message.media:
        content.append({"text": stand_in(part)} if isinstance(part, AudioPart) else _block(part))
    result: dict[str, Any] = {
        "toolUseId": message.tool_call_id or "",
        "content": content or [{"text": ""}],
    }
    if message.is_error:
        result["status"] = "error"
    return result


def _append(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _block(part: TextPart | MediaPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    if isinstance(part, AudioPart):
        raise unsupported("bedrock", part, "Converse takes no audio input")
    if isinstance(part, DocumentPart):
        return _document(part)
    image_format = _FORMATS.get(inline_type(part).lower())
    if image_format is None:
        raise unsupported(
            "bedrock", part, f"Converse takes png, jpeg, gif or webp, not {part.media_type!r}"
        )
    return {"image": {"format": image_format, "source": _source(part)}}


def inline_type(part: MediaPart) -> str:
    """The part's media type, read from its ``data:`` URL when it has one."""
    found = inline(part)
    return found[0] if found is not None else part.media_type


def _source(part: MediaPart) -> dict[str, Any]:
    found = inline(part)
    if found is not None:
        return {"bytes": found[1]}
    url = part.url or ""
    if url.startswith("s3://"):
        return {"s3Location": {"uri": url}}
    raise unsupported(
        "bedrock",
        part,
        f"Converse cannot fetch URLs ({url[:60]!r}): give bytes, a data: URL or an s3:// URL",
    )


def _document(part: DocumentPart) -> dict[str, Any]:
    media_type = inline_type(part).lower()
    doc_format = _DOCUMENT_FORMATS.get(media_type)
    if doc_format is None:
        raise unsupported(
            "bedrock", part, f"Converse takes PDF or text documents, not {part.media_type!r}"
        )
    return {"document": {"format": doc_format, "name": _doc_name(part), "source": _source(part)}}


def _doc_name(part: DocumentPart) -> str:
    """A name Converse accepts: letters, digits, single spaces, hyphens, parentheses, brackets."""
    raw = part.name or "document"
    stem = raw.rsplit(".", 1)[0] if "." in raw else raw
    cleaned = _NAME_CHARS.sub(" ", stem)
    return " ".join(cleaned.split())[:200] or "document"


# ---------------------------------------------------------------- responses
def response_from_wire(data: Mapping[str, Any], *, model: str) -> ChatResponse:
    """A :class:`ChatResponse` from a Converse response (which names no model: ``model`` does)."""
    message = (data.get("output") or {}).get("message") or {}
    text: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    for block in message.get("content") or ():
        if "reasoningContent" in block:
            reasoning.append(_reasoning.reasoning_from_block(block["reasoningContent"]))
        elif "text" in block:
            text.append(block["text"] or "")
        elif "toolUse" in block:
            use = block["toolUse"]
            arguments = use.get("input")
            tool_id, name = use.get("toolUseId") or "", use.get("name") or ""
            calls.append(
                ToolCall(id=tool_id, name=name, arguments=dict(arguments))
                if isinstance(arguments, Mapping)
                else ToolCall.from_json(
                    tool_id, name, arguments if isinstance(arguments, str) else ""
                )
            )
    return ChatResponse(
        message=Message.assistant("".join(text), calls, reasoning=reasoning),
        stop_reason=stop_reason(_STOP_REASONS, data.get("stopReason"), has_calls=bool(calls)),
        usage=_usage(data.get("usage")),
        model=model,
    )


def _usage(usage: Mapping[str, Any] | None) -> Usage:
    """Usage from Converse's counts, whose ``inputTokens`` leave out cache reads and writes."""
    return cache_exclusive_usage(
        usage,
        input="inputTokens",
        output="outputTokens",
        read="cacheReadInputTokens",
        written="cacheWriteInputTokens",
    )


class EventDecoder:
    """Turns ConverseStream events (``{"contentBlockDelta": {...}}``, ...) into daimon events.

    A stream ends with ``messageStop`` then ``metadata`` (the usage); one that ends before both
    was cut short.
    """

    __slots__ = (
        "_calls",
        "_count",
        "_model",
        "_reasoning",
        "_stop",
        "_stopped",
        "_usage",
        "received",
    )

    def __init__(self, *, model: str) -> None:
        self._model = model
        self._calls: dict[int, PendingToolCall] = {}
        self._reasoning = _reasoning.ReasoningStream()
        self._count = 0
        self._stop: str | None = None
        self._stopped = False
        self._usage: Mapping[str, Any] | None = None
        self.received = False
        """Whether any event arrived."""

    def feed(self, event: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The daimon events one stream event carries."""
        self.received = True
        if "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            delta = body.get("delta") or {}
            if delta.get("text"):
                yield TextDelta(text=delta["text"])
            elif "toolUse" in delta:
                piece = (delta["toolUse"] or {}).get("input") or ""
                call = self._calls.get(body.get("contentBlockIndex", 0))
                if call is not None and piece:
                    yield call.add(piece)
            elif "reasoningContent" in delta:
                self._reasoning.add(body.get("contentBlockIndex", 0), delta["reasoningContent"])
        elif "contentBlockStart" in event:
            body = event["contentBlockStart"]
            use = (body.get("start") or {}).get("toolUse")
            if use is not None:
                call = PendingToolCall(
                    id=use.get("toolUseId") or "", name=use.get("name") or "", index=self._count
                )
                self._count += 1
                self._calls[body.get("contentBlockIndex", 0)] = call
                yield call.start()
        elif "contentBlockStop" in event:
            index = event["contentBlockStop"].get("contentBlockIndex", 0)
            call = self._calls.pop(index, None)
            if call is not None:
                yield call.end()
            thought = self._reasoning.stop(index)
            if thought is not None:
                yield thought
        elif "messageStop" in event:
            self._stop = event["messageStop"].get("stopReason")
            self._stopped = True
            for index in sorted(self._calls):
                yield self._calls[index].end()
            self._calls.clear()
        elif "metadata" in event:
            self._usage = event["metadata"].get("usage") or {}

    def finish(self) -> Iterator[StreamEvent]:
        """The closing events; :class:`StreamClosedError` if the stream never finished."""
        if not self._stopped or self._usage is None:
            missing = "messageStop" if not self._stopped else "its metadata"
            raise StreamClosedError(f"bedrock stream ended before {missing}", provider="bedrock")
        yield UsageEvent(usage=_usage(self._usage))
        yield Done(
            stop_reason=stop_reason(_STOP_REASONS, self._stop, has_calls=self._count > 0),
            model=self._model,
        )


# ---------------------------------------------------------------- errors
