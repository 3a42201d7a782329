"""The extension chains: an agent's layers, and one run's model-call and tool-call chains.

An agent's layers are, outermost first: its hooks' call callbacks (:class:`HookCalls`), its
middleware (one :class:`MiddlewareStack`), then its ``extensions`` in order. Each chain holds only
the layers that override its method; an agent with none has no chain, and the loop calls the
model and the tools directly (the fast path).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Coroutine, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import BuilderError, ExtensionError, RunCancelled
from daimon.core.events import StreamEvent
from daimon.core.messages import ToolCall
from daimon.core.tools import ToolOutput
from daimon.extensions import CallModel, CallTool, Extension, overrides
from daimon.hooks import AgentHook, HookCalls
from daimon.middleware import Middleware, MiddlewareStack
from daimon.state import RunState

if TYPE_CHECKING:
    from daimon.agent._run import Interrupt

__all__ = ("Layers", "Relayed", "layers", "model_chain", "stream_chain", "tool_chain")

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


class Relayed:
    """Awaited by a streamed model call inside a chain: hands ``event`` to :func:`stream_chain`.

    Its ``await`` yields the object itself up through every coroutine of the chain to the one
    that drives them, which passes the event on to the caller and resumes the chain when the
    caller asks for the next one: no task and no event-loop round trip per event.
    """

    __slots__ = ("event",)

    def __init__(self, event: StreamEvent) -> None:
        self.event = event

    def __await__(self) -> Generator[Relayed, None, None]:
        yield self


class _PassOn:
    """Awaited by :func:`stream_chain`: passes what the chain yielded up to the run's task.

    That is a future the chain waits for (or ``None``, a bare yield); what the task sends back
    is returned, what it throws (a cancellation) is raised.
    """

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __await__(self) -> Generator[object, Any, Any]:
        return (yield self.value)


async def stream_chain(
    chain: CallModel, request: ChatRequest, interrupt: Interrupt, result: list[ChatResponse]
) -> AsyncGenerator[StreamEvent, None]:
    """Drive ``chain`` in the run's own task, yielding the events it relays.

    The chain's coroutine is stepped by hand: a :class:`Relayed` event goes to the caller; any
    other yield (a future the chain awaits) goes up to the task, and what the task sends or
    throws back (a result, a cancellation) goes down to the chain. A caller that leaves the
    stream raises ``GeneratorExit`` in the chain where it relayed the last event. The chain's
    response is appended to ``result``.
    """
    coro = cast(Coroutine[Any, Any, ChatResponse], chain(request))
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            out = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            result.append(stop.value)
            return
        value = error = None
        if type(out) is Relayed:
            interrupt.armed = False  # the consumer's awaits aren't ours
            try:
                yield out.event
            except BaseException as exc:  # the caller left (GeneratorExit), or threw
                error = exc
            interrupt.armed = True
            if error is None and interrupt.cancel.cancelled:  # by the consumer, between events
                error = RunCancelled(interrupt.cancel.reason)
        else:
            try:
                value = await _PassOn(out)
            except BaseException as exc:  # a cancellation (or the future's error): the chain's
                error = exc
