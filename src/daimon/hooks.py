"""AgentHook: callbacks at each step of a run."""

from __future__ import annotations

from collections.abc import Sequence

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.messages import ToolCall
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.extensions import CallModel, CallTool, Extension
from daimon.state import RunState

__all__ = ("AgentHook", "HookCalls")


class AgentHook:
    """Subclass and override the callbacks you need; the rest do nothing.

    An exception raised by a hook fails the run: hooks are part of the program, not observers
    that may be ignored.

    Every run that :meth:`on_run_start` began ends with exactly one of :meth:`on_run_end` (it
    finished or paused) and :meth:`on_error` (it failed, was cancelled or interrupted, or its
    stream was abandoned), so whatever a hook opens at the start it can close at the end.

    The callbacks about calls (:meth:`on_model_response`, :meth:`on_tool_call`,
    :meth:`on_tool_result`) are delivered by :class:`HookCalls`, an
    :class:`~daimon.extensions.Extension` outside every other one; the others by the loop.
    """

    async def on_run_start(self, state: RunState) -> None:
        """Once, when a run starts (or resumes), before its first model call."""

    async def on_iteration_start(self, state: RunState) -> None:
        """Before each model call."""

    async def on_model_response(self, response: ChatResponse, state: RunState) -> None:
        """After each model call (and after middleware)."""

    async def on_tool_call(self, call: ToolCall, state: RunState) -> None:
        """Before a tool runs."""

    async def on_tool_result(self, call: ToolCall, output: ToolOutput, state: RunState) -> None:
        """After a tool ran (or failed: see ``output.is_error``)."""

    async def on_iteration_end(self, state: RunState) -> None:
        """After the tools of an iteration have all run."""

    async def on_run_end(self, response: AgentResponse, state: RunState) -> None:
        """Once, when the run finishes or pauses for approvals (``response.paused``)."""

    async def on_error(self, error: BaseException, state: RunState) -> None:
        """When the run ends without an answer, before the error reaches the caller.

        ``error`` is what ended it: an exception; :class:`asyncio.CancelledError` when the run's
        task was cancelled (``task.cancel()``, ``asyncio.timeout``); :class:`KeyboardInterrupt`;
        or :class:`GeneratorExit` when a ``prompt_stream`` consumer closed the stream early or
        dropped it (then asyncio closes it in a task of its own). ``state.usage`` and
        ``state.cost`` hold what the run had used and spent.
        """


class HookCalls(Extension):
    """The hooks' callbacks about calls, as the outermost extension (made by the agent)."""

    __slots__ = ("hooks",)

    def __init__(self, hooks: Sequence[AgentHook]) -> None:
        self.hooks = tuple(hooks)

    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunState, call_next: CallModel
    ) -> ChatResponse:
        """The call, then every hook's ``on_model_response``."""
        response = await call_next(request)
        for hook in self.hooks:
            await hook.on_model_response(response, ctx)
        return response

    async def wrap_tool_call(
        self, call: ToolCall, ctx: RunState, call_next: CallTool
    ) -> ToolOutput:
        """Every hook's ``on_tool_call``, the call, then every hook's ``on_tool_result``."""
        for hook in self.hooks:
            await hook.on_tool_call(call, ctx)
        output = await call_next(call)
        for hook in self.hooks:
            await hook.on_tool_result(call, output, ctx)
        return output
