"""AgentHook: callbacks at each step of a run."""

from __future__ import annotations

from daimon.core.chat import ChatResponse
from daimon.core.messages import ToolCall
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.state import RunState

__all__ = ("AgentHook",)


class AgentHook:
    """Subclass and override the callbacks you need; the rest do nothing.

    An exception raised by a hook fails the run: hooks are part of the program, not observers
    that may be ignored.
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
        """When the run fails, before the error reaches the caller."""
