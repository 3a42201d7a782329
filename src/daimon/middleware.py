"""Middleware: intercept requests, responses and tool calls; short-circuit any of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.messages import ToolCall
from daimon.core.tools import ToolOutput
from daimon.extensions import CallModel, CallTool, Extension
from daimon.state import RunState

__all__ = ("Middleware", "MiddlewareStack", "ShortCircuit")


@dataclass(frozen=True, slots=True)
class ShortCircuit:
    """Stop the pipeline and use this response instead of (or in place of) the model's."""

    response: ChatResponse


class Middleware:
    """Intercepts a run's model calls and tool calls; override what you need.

    Each method may return:

    - ``None``: carry on unchanged;
    - a replacement (a new request, response or tool call);
    - a :class:`ShortCircuit` (requests, responses): skip the rest, use its response;
    - a :class:`ToolOutput` (tool calls): skip the tool, use this result.
    """

    async def on_request(
        self, request: ChatRequest, state: RunState
    ) -> ChatRequest | ShortCircuit | None:
        """Before the model call."""
        return None

    async def on_response(
        self, response: ChatResponse, state: RunState
    ) -> ChatResponse | ShortCircuit | None:
        """After the model call."""
        return None

    async def on_tool_call(self, call: ToolCall, state: RunState) -> ToolCall | ToolOutput | None:
        """Before a tool runs."""
        return None


class MiddlewareStack(Extension):
    """Runs middleware in order; the first short-circuit wins.

    The agent runs the stack as one :class:`~daimon.extensions.Extension`, inside the hooks and
    outside the agent's ``extensions``: every request passes each ``on_request`` (until one
    short-circuits), every response each ``on_response``, every tool call each ``on_tool_call``.
    """

    __slots__ = ("_middleware",)

    def __init__(self, middleware: Iterable[Middleware] = ()) -> None:
        self._middleware = tuple(middleware)

    @property
    def middleware(self) -> tuple[Middleware, ...]:
        """The middleware, in the order they run."""
        return self._middleware

    def __bool__(self) -> bool:
        return bool(self._middleware)

    def __len__(self) -> int:
        return len(self._middleware)

    async def on_request(
        self, request: ChatRequest, state: RunState
    ) -> tuple[ChatRequest, ChatResponse | None]:
        """The request to send, and a response when some middleware short-circuited the call."""
        for middleware in self._middleware:
            result = await middleware.on_request(request, state)
            if isinstance(result, ShortCircuit):
                return request, result.response
            if result is not None:
                request = result
        return request, None

    async def on_response(self, response: ChatResponse, state: RunState) -> ChatResponse:
        """The response after every middleware had its say."""
        for middleware in self._middleware:
            result = await middleware.on_response(response, state)
            if isinstance(result, ShortCircuit):
                return result.response
            if result is not None:
                response = result
        return response

    async def on_tool_call(self, call: ToolCall, state: RunState) -> ToolCall | ToolOutput:
        """The call to run, or the output to use without running it."""
        for middleware in self._middleware:
            result = await middleware.on_tool_call(call, state)
            if isinstance(result, ToolOutput):
                return result
            if result is not None:
                call = result
        return call

    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunState, call_next: CallModel
    ) -> ChatResponse:
        """``on_request`` (which may answer instead of the model), the call, ``on_response``."""
        request, response = await self.on_request(request, ctx)
        if response is None:
            response = await call_next(request)
        return await self.on_response(response, ctx)

    async def wrap_tool_call(
        self, call: ToolCall, ctx: RunState, call_next: CallTool
    ) -> ToolOutput:
        """``on_tool_call`` (which may answer instead of the tool), then the call."""
        replaced = await self.on_tool_call(call, ctx)
        if isinstance(replaced, ToolOutput):
            return replaced
        return await call_next(replaced)
