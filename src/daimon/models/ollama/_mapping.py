"""Ollama ``/api/chat`` wire format: daimon requests to chat arguments, responses to daimon.

Plain data both ways, plus the client plumbing; no SDK import. Only :mod:`daimon.models.ollama`
uses it.

Tool-call ids: Ollama's calls carry none. Each call gets a synthesized id (``call_<hex>``), the
same in every event of a stream and in the final response; Ollama matches a tool result to its
call by the tool's name (``tool_name``) and position, so tool results are sent in the order of the
calls they answer.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.errors import ModelError, StreamClosedError
from daimon.core.events import (
    Done,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from daimon.core.messages import ImagePart, Message, Role, ToolCall

__all__ = (
    "CHAT_ARGUMENTS",
    "ChunkDecoder",
    "Clients",
    "chat_arguments",
    "is_retryable_status",
    "messages_to_wire",
    "new_call_id",
    "response_from_wire",
    "retry_after",
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
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": dict(spec.parameters),
                },
            }
            for spec in specs
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
            result = {
                "role": "tool",
                "content": message.text,
                "tool_name": message.name or names.get(key, ""),
            }
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
            entry = {"role": "user", "content": message.text}
            images = [_image(p) for p in message.content if isinstance(p, ImagePart)]
            if images:
                entry["images"] = images
            wire.append(entry)
        else:
            wire.append({"role": message.role.value, "content": message.text})
    flush()
    return wire


def _image(part: ImagePart) -> bytes:
    if part.data is not None:
        return part.data
    url = part.url or ""
    if url.startswith("data:") and ";base64," in url:
        return base64.b64decode(url.partition(";base64,")[2])
    raise ModelError(
        f"ollama cannot fetch image URLs ({url[:60]!r}): give the image as bytes or a data: URL",
        provider="ollama",
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
        stop_reason=_stop_reason(data.get("done_reason"), has_calls=bool(calls)),
        usage=_usage(data),
        model=data.get("model") or None,
    )


def _stop_reason(reason: str | None, *, has_calls: bool) -> StopReason:
    stop = _STOP_REASONS.get(reason or "", StopReason.END_TURN)
    # Ollama ends a tool-calling turn with "stop".
    return StopReason.TOOL_USE if has_calls and stop is StopReason.END_TURN else stop


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
        stop = _stop_reason(self._done.get("done_reason"), has_calls=self._calls > 0)
        yield Done(stop_reason=stop, model=self._model)


# ---------------------------------------------------------------- errors
def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth retrying: timeouts, conflicts, rate limits, 5xx."""
    return status in (408, 409, 429) or status >= 500


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


# ---------------------------------------------------------------- clients
class Clients:
    """SDK clients, one per event loop (connection pools belong to the loop that opened them).

    Each client is closed by :meth:`aclose`, or else when its event loop shuts down
    (``asyncio.run`` and ``asyncio.Runner`` finalize async generators, and a guard generator
    closes the client then), so no connection outlives its loop.
    """

    __slots__ = ("_client", "_close", "_factory", "_given", "_guard", "_loop")

    def __init__(
        self, factory: Callable[[], Any], given: Any, close: Callable[[Any], Awaitable[None]]
    ) -> None:
        self._factory = factory
        self._given = given
        self._close = close
        self._client: Any = None
        self._guard: AsyncGenerator[None] | None = None
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    async def get(self) -> Any:
        """The client for the running loop."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is None or self._loop() is not loop:
            client = self._factory()
            guard = _close_with_loop(client, self._close)
            await anext(guard)  # the loop now tracks the guard, and finalizes it at shutdown
            self._client, self._guard, self._loop = client, guard, weakref.ref(loop)
        return self._client

    async def aclose(self) -> None:
        """Close the client built for the running loop, if any."""
        guard, loop = self._guard, self._loop
        self._client = self._guard = self._loop = None
        if guard is not None and loop is not None and loop() is asyncio.get_running_loop():
            await guard.aclose()


async def _close_with_loop(
    client: Any, close: Callable[[Any], Awaitable[None]]
) -> AsyncGenerator[None]:
    try:
        yield
    finally:
        await close(client)
