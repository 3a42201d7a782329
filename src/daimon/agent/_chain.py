"""The extension chains: an agent's layers, and one run's model-call and tool-call chains.

An agent's layers are, outermost first: its hooks' call callbacks (:class:`HookCalls`), its
middleware (one :class:`MiddlewareStack`), then its ``extensions`` in order. Each chain holds only
the layers that override its method; an agent with none has no chain, and the loop calls the
model and the tools directly (the fast path).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import BuilderError, ExtensionError
from daimon.core.events import StreamEvent
from daimon.core.messages import ToolCall
from daimon.core.tools import ToolOutput
from daimon.extensions import CallModel, CallTool, Extension, overrides
from daimon.hooks import AgentHook, HookCalls
from daimon.middleware import Middleware, MiddlewareStack
from daimon.state import RunState

if TYPE_CHECKING:
    from daimon.agent._run import Interrupt

__all__ = ("Handoff", "Layers", "layers", "model_chain", "stream_chain", "tool_chain")

Layers = tuple[tuple[Extension, ...], tuple[Extension, ...]]
"""An agent's model-call layers and tool-call layers, outermost first."""

NO_LAYERS: Layers = ((), ())


class Counter(Protocol):
    """What a model chain needs of its run: how many responses it counted, and counting one."""

    calls: int

    async def counted(self, response: ChatResponse) -> None: ...


def layers(
    hooks: Sequence[AgentHook], middleware: MiddlewareStack, extensions: Iterable[object]
) -> Layers:
    """The agent's layers, outermost first, each in the chains whose method it overrides."""
    model: list[Extension] = []
    tool: list[Extension] = []
    if overrides_any(hooks, AgentHook, "on_model_response", "on_tool_call", "on_tool_result"):
        adapter = HookCalls(hooks)
        if overrides_any(hooks, AgentHook, "on_model_response"):
            model.append(adapter)
        if overrides_any(hooks, AgentHook, "on_tool_call", "on_tool_result"):
            tool.append(adapter)
    stack = middleware.middleware
    if overrides_any(stack, Middleware, "on_request", "on_response"):
        model.append(middleware)
    if overrides_any(stack, Middleware, "on_tool_call"):
        tool.append(middleware)
    for extension in extensions:
        if not isinstance(extension, Extension):
            raise BuilderError(
                f"extensions must be Extension instances, not {type(extension).__name__}"
            )
        if overrides(extension, Extension, "wrap_model_call"):
            model.append(extension)
        if overrides(extension, Extension, "wrap_tool_call"):
            tool.append(extension)
    return tuple(model), tuple(tool)


def overrides_any(objects: Iterable[object], base: type, *names: str) -> bool:
    return any(overrides(obj, base, *names) for obj in objects)


# ------------------------------------------------------------------------------ model calls


def model_chain(
    layers: Sequence[Extension], ctx: RunState, innermost: CallModel, run: Counter
) -> CallModel:
    """``innermost`` (the model) inside ``layers``, the first outermost."""
    call = innermost
    for layer in reversed(layers):
        call = _model_link(layer, ctx, call, run)
    return call


def _model_link(layer: Extension, ctx: RunState, inner: CallModel, run: Counter) -> CallModel:
    wrap = layer.wrap_model_call

    async def link(request: ChatRequest) -> ChatResponse:
        before = run.calls
        response = await wrap(request, ctx, inner)
        if not isinstance(response, ChatResponse):
            raise ExtensionError(_wrong(layer, "wrap_model_call", response, "a ChatResponse"))
        if run.calls == before:  # made up by this layer: counted as the model's would be
            await run.counted(response)
        return response

    return link


# ------------------------------------------------------------------------------- tool calls


def tool_chain(layers: Sequence[Extension], ctx: RunState, innermost: CallTool) -> CallTool:
    """``innermost`` (the tool) inside ``layers``, the first outermost."""
    call = innermost
    for layer in reversed(layers):
        call = _tool_link(layer, ctx, call)
    return call


def _tool_link(layer: Extension, ctx: RunState, inner: CallTool) -> CallTool:
    wrap = layer.wrap_tool_call

    async def link(call: ToolCall) -> ToolOutput:
        output = await wrap(call, ctx, inner)
        if not isinstance(output, ToolOutput):
            raise ExtensionError(_wrong(layer, "wrap_tool_call", output, "a ToolOutput"))
        return output

    return link


def _wrong(layer: Extension, method: str, value: object, expected: str) -> str:
    hint = " (did it forget to return call_next's result?)" if value is None else ""
    return f"{type(layer).__name__}.{method} returned {type(value).__name__}, not {expected}{hint}"


# --------------------------------------------------------------------- streamed model calls


class Handoff:
    """Passes a model chain's stream events, one at a time, from its task to the run's generator.

    The chain's task parks after each event until the generator asks for the next one, so it
    never runs while the caller holds an event; a caller that leaves the stream is seen by the
    chain as ``GeneratorExit`` where it waits.
    """

    __slots__ = ("_loop", "_ready", "_resume")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[StreamEvent | None] = self._loop.create_future()
        self._resume: asyncio.Future[None] | None = None

    async def send(self, event: StreamEvent) -> None:
        """In the chain's task: hand ``event`` over and wait until the caller wants more."""
        resume = self._resume = self._loop.create_future()
        self._ready.set_result(event)
        await resume

    def finished(self, task: asyncio.Future[Any]) -> None:
        """The chain's task ended: wake the generator."""
        if not self._ready.done():
            self._ready.set_result(None)

    async def receive(self) -> StreamEvent | None:
        """In the generator: the next event, or ``None`` when the chain's task ended."""
        event = await self._ready
        self._ready = self._loop.create_future()
        return event

    def next(self) -> None:
        """In the generator: let the chain's task go on."""
        resume, self._resume = self._resume, None
        if resume is not None and not resume.done():
            resume.set_result(None)

    def leave(self, error: BaseException) -> None:
        """In the generator: the caller left; raise ``error`` in the chain where it waits."""
        resume, self._resume = self._resume, None
        if resume is not None and not resume.done():
            resume.set_exception(error)


async def stream_chain(
    chain: CallModel,
    request: ChatRequest,
    handoff: Handoff,
    interrupt: Interrupt,
    result: list[ChatResponse],
) -> AsyncGenerator[StreamEvent, None]:
    """Run ``chain`` in a task of its own, yielding the events it hands over.

    The chain's response is appended to ``result``.
    """
    task: asyncio.Future[ChatResponse] = asyncio.ensure_future(chain(request))
    task.add_done_callback(handoff.finished)
    try:
        while True:
            event = await handoff.receive()
            if event is None:
                break
            interrupt.armed = False  # the consumer's awaits aren't ours
            yield event
            interrupt.armed = True
            handoff.next()
    except BaseException as exc:
        if not task.done():
            if isinstance(exc, GeneratorExit):
                handoff.leave(GeneratorExit())
            else:
                task.cancel()
            await asyncio.wait((task,))
        if not task.cancelled():
            task.exception()  # retrieved: the run's own error is what propagates
        raise
    result.append(task.result())
