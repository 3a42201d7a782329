"""FunctionModel: a Python function plays the model, for tests and examples."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from types import CoroutineType
from typing import TypeAlias, cast

from daimon.core.chat import ChatRequest, ChatResponse, StopReason
from daimon.core.errors import BuilderError
from daimon.core.events import Done, StreamEvent, TextDelta, ToolCallEnd
from daimon.kit.streaming import StreamAccumulator, events_from_response

__all__ = ("FunctionModel",)

Reply: TypeAlias = ChatResponse | str
GenerateFunction: TypeAlias = Callable[[ChatRequest], Reply | Awaitable[Reply]]
StreamItem: TypeAlias = StreamEvent | str
StreamFunction: TypeAlias = Callable[
    [ChatRequest], AsyncIterator[StreamItem] | Iterator[StreamItem] | Iterable[StreamItem]
]


_REPLIES = (ChatResponse, str)


class FunctionModel:
    """A model whose answers come from your function.

    ``function`` maps a :class:`ChatRequest` to a :class:`ChatResponse` (or plain text), sync or
    async. ``stream_function`` yields stream events (plain strings are text deltas), sync or async;
    a final ``Done`` is added when it does not yield one. Give either or both: each mode falls back
    on the other. ``supports_json_schema`` makes agents with an ``output_type`` ask this model for
    native JSON output (as they do with providers that have it) rather than an output tool.
    """

    __slots__ = (
        "_function",
        "_stream_function",
        "model_name",
        "supports_json_schema",
    )

    def __init__(
        self,
        function: GenerateFunction | None = None,
        *,
        stream_function: StreamFunction | None = None,
        model_name: str = "function",
        supports_json_schema: bool = False,
    ) -> None:
        if function is None and stream_function is None:
            raise BuilderError("FunctionModel needs a function or a stream_function")
        self._function = function
        self._stream_function = stream_function
        self.model_name = model_name
        self.supports_json_schema = supports_json_schema
        """Ask agents for native JSON-schema output (``response_format``) instead of a tool."""

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Call the function (or drain the stream function) for one answer."""
        if self._function is None:
            accumulator = StreamAccumulator()
            async for event in self._stream(request):
                accumulator.add(event)
            return accumulator.response()
        result: object = self._function(request)
        # Whether to await is read off the result rather than worked out when the model is built
        # (inspect.iscoroutinefunction costs more than the rest of __init__); inspect.isawaitable
        # is Python code, so it is asked only of what is neither a coroutine nor a reply.
        if type(result) is CoroutineType or (
            not isinstance(result, _REPLIES) and inspect.isawaitable(result)
        ):
            result = await cast(Awaitable[object], result)
        if type(result) is ChatResponse:
            return result
        return self._as_response(result)

    def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Stream the stream function's events, or the function's answer as events."""
        # The stream itself, not an async generator re-yielding it: one hop less per event.
        if self._stream_function is None:
            return self._replay(request)
        return self._stream(request)

    async def _replay(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        for event in events_from_response(await self.generate(request)):
            yield event

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        assert self._stream_function is not None
        produced = self._stream_function(request)
        saw_tool_call = False
        if isinstance(produced, AsyncIterator):
            async for item in produced:
                if type(item) is TextDelta:  # most events are deltas: one check for them
                    yield item
                    continue
                event = TextDelta(text=item) if isinstance(item, str) else item
                if isinstance(event, Done):
                    yield event
                    return
                saw_tool_call = saw_tool_call or isinstance(event, ToolCallEnd)
                yield event
        else:
            for item in produced:
                if type(item) is TextDelta:
                    yield item
                    continue
                event = TextDelta(text=item) if isinstance(item, str) else item
                if isinstance(event, Done):
                    yield event
                    return
                saw_tool_call = saw_tool_call or isinstance(event, ToolCallEnd)
                yield event
        stop = StopReason.TOOL_USE if saw_tool_call else StopReason.END_TURN
        yield Done(stop_reason=stop, model=self.model_name)

    def _as_response(self, result: object) -> ChatResponse:
        if isinstance(result, str):
            return ChatResponse.reply(result, model=self.model_name)
        if isinstance(result, ChatResponse):
            return result
        kind = type(result).__name__
        raise TypeError(f"FunctionModel's function must return a ChatResponse or str, not {kind}")
