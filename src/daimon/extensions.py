"""Extension: one wrap-style interface around every model call and every tool call of a run.

An extension gets the call, the run's state and ``call_next``, the rest of the chain. It may
change the call before passing it on, not call ``call_next`` at all (its own result is used),
call it again (a retry), or change what comes back::

    class Timing(Extension):
        async def wrap_model_call(self, request, ctx, call_next):
            start = time.perf_counter()
            response = await call_next(request)
            print(f"model: {time.perf_counter() - start:.3f}s")
            return response

    agent = Agent(model, extensions=[Timing()])

The first extension listed is the outermost. :class:`~daimon.hooks.AgentHook` callbacks about
calls and :class:`~daimon.middleware.Middleware` are adapters over this interface, and
:func:`~daimon.telemetry.instrument` writes its ``chat`` and ``execute_tool`` spans through it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.messages import ToolCall
from daimon.core.tools import ToolOutput
from daimon.state import RunState

__all__ = ("CallModel", "CallTool", "Extension")

CallModel: TypeAlias = Callable[[ChatRequest], Awaitable[ChatResponse]]
"""The rest of a model call's chain: the next extension, and at the end the model."""

CallTool: TypeAlias = Callable[[ToolCall], Awaitable[ToolOutput]]
"""The rest of a tool call's chain: the next extension, and at the end the tool."""


class Extension:
    """Wraps a run's model calls and tool calls; override what you need.

    A method that is not overridden costs nothing: the agent leaves the extension out of that
    chain. Whatever an extension raises fails the run (its hooks' ``on_error`` see it); returning
    anything but a ``ChatResponse`` (a ``ToolOutput``) raises
    :class:`~daimon.core.errors.ExtensionError`.

    **Counting.** Every response the model gives is counted as it arrives (usage, cost, budget,
    ``ctx.iteration``), retries included. A response an extension returns without the model
    having answered (a short-circuit, or a fallback after ``call_next`` raised) is counted once,
    as the model's would be, so ``max_iterations`` still bounds the run.

    **Streaming runs** (``prompt_stream``). ``call_next`` still returns the whole response; the
    model's events reach the caller as they arrive, while ``call_next`` runs. A retry streams
    again (the caller sees both attempts' deltas). A response made up by an extension produces no
    deltas: the caller sees its ``UsageEvent``, its tool results and the final ``Done``. The
    chain runs in the run's own task and is paused while the caller holds an event; a caller
    that closes the stream early raises ``GeneratorExit`` inside ``call_next``.
    """

    __slots__ = ()

    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunState, call_next: CallModel
    ) -> ChatResponse:
        """Around each model call (each iteration of the run, and each retry)."""
        return await call_next(request)

    async def wrap_tool_call(
        self, call: ToolCall, ctx: RunState, call_next: CallTool
    ) -> ToolOutput:
        """Around each tool call; parallel calls of one turn run their chains concurrently."""
        return await call_next(call)


def overrides(obj: object, base: type, *names: str) -> bool:
    """Whether ``obj``'s class overrides any of ``base``'s methods ``names``."""
    cls = type(obj)
    return any(getattr(cls, name) is not getattr(base, name) for name in names)
