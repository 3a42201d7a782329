"""Turning a model's event stream into a response, and a response into events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from daimon.core.chat import ChatResponse, StopReason, Usage
from daimon.core.errors import StreamClosedError
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
from daimon.core.messages import Message, Reasoning, ToolCall

__all__ = ("PendingToolCall", "StreamAccumulator", "events_from_response", "stream_from_response")


class PendingToolCall:
    """A tool call a provider streams in pieces: its id and name first, then argument text.

    Stream decoders keep one per open call and turn it into daimon events.
    """

    __slots__ = ("arguments", "id", "index", "name")

    def __init__(self, *, id: str, name: str, index: int) -> None:
        self.id = id
        self.name = name
        self.index = index
        self.arguments: list[str] = []

    def start(self) -> ToolCallStart:
        """The event that opens the call."""
        return ToolCallStart(call_id=self.id, name=self.name, index=self.index)

    def add(self, piece: str) -> ToolCallDelta:
        """Take one piece of the arguments' JSON text; the event that carries it."""
        self.arguments.append(piece)
        return ToolCallDelta(call_id=self.id, arguments_delta=piece, index=self.index)

    def end(self) -> ToolCallEnd:
        """The event that closes the call, with its arguments parsed (or kept raw if not JSON)."""
        return ToolCallEnd(
            call=ToolCall.from_json(self.id, self.name, "".join(self.arguments)), index=self.index
        )


_CallKey = tuple[str, int]
"""A streamed call's id and index."""


class StreamAccumulator:
    """Collects a model stream's events into the :class:`ChatResponse` they describe."""

    __slots__ = ("_arguments", "_calls", "_names", "_order", "_reasoning", "_text", "done", "usage")

    def __init__(self) -> None:
        self._text: list[str] = []
        # Calls are told apart by id and position: a model may give two calls one id, and the
        # loop makes such ids unique before anything runs (one call must not swallow another).
        self._calls: dict[_CallKey, ToolCall] = {}
        self._names: dict[_CallKey, str] = {}
        self._arguments: dict[_CallKey, list[str]] = {}
        self._order: list[_CallKey] = []
        self._reasoning: list[Reasoning] = []
        self.usage = Usage()
        self.done: Done | None = None

    def add(self, event: StreamEvent) -> None:
        """Take one event."""
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ToolCallStart):
            key = (event.call_id, event.index)
            self._track(key)
            self._names[key] = event.name
        elif isinstance(event, ToolCallDelta):
            # Some providers send no start event: a delta alone still opens the call.
            key = (event.call_id, event.index)
            self._track(key)
            self._arguments[key].append(event.arguments_delta)
        elif isinstance(event, ToolCallEnd):
            key = (event.call.id, event.index)
            self._track(key)
            self._calls[key] = event.call
        elif isinstance(event, UsageEvent):
            self.usage = event.usage
        elif isinstance(event, Done):
            self.done = event
        elif isinstance(event, ReasoningEvent):
            self._reasoning.append(event.reasoning)

    def _track(self, key: _CallKey) -> None:
        if key not in self._arguments:
            self._order.append(key)
            self._arguments[key] = []

    @property
    def text(self) -> str:
        """The text received so far."""
        return "".join(self._text)

    def response(self) -> ChatResponse:
        """The complete response; :class:`StreamClosedError` if the stream never finished."""
        if self.done is None:
            raise StreamClosedError("model stream ended without a Done event")
        calls: list[ToolCall] = []
        for key in self._order:
            call = self._calls.get(key)
            if call is None:
                call = ToolCall.from_json(
                    key[0], self._names.get(key, ""), "".join(self._arguments[key])
                )
            calls.append(call)
        stop = self.done.stop_reason
        if calls and stop is StopReason.END_TURN:
            stop = StopReason.TOOL_USE
        return ChatResponse(
            message=Message.assistant(self.text, calls, reasoning=self._reasoning),
            stop_reason=stop,
            usage=self.usage,
            model=self.done.model,
        )


def events_from_response(response: ChatResponse) -> Iterator[StreamEvent]:
    """The events a stream of ``response`` would have produced."""
    for reasoning in response.message.reasoning:
        yield ReasoningEvent(reasoning=reasoning)
    text = response.message.text
    if text:
        yield TextDelta(text=text)
    for index, call in enumerate(response.message.tool_calls):
        yield ToolCallStart(call_id=call.id, name=call.name, index=index)
        yield ToolCallDelta(call_id=call.id, arguments_delta=call.arguments_json, index=index)
        yield ToolCallEnd(call=call, index=index)
    yield UsageEvent(usage=response.usage)
    yield Done(stop_reason=response.stop_reason, model=response.model)


async def stream_from_response(response: ChatResponse) -> AsyncIterator[StreamEvent]:
    """An async stream of :func:`events_from_response`, for models that cannot stream."""
    for event in events_from_response(response):
        yield event
