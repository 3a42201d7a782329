"""The state a checkpoint stores so a run can resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from daimon.core._fastinit import fast_init
from daimon.core.chat import Usage
from daimon.core.messages import Message, ToolCall
from daimon.core.tools import ToolOutput

__all__ = ("CheckpointState", "RunProgress")


@fast_init  # hot: two per run (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunProgress:
    """Where an agent run stands in its own messages: the loop's bookkeeping in a checkpoint."""

    status: Literal["running", "completed"] = "running"
    """``completed`` once the run has its answer: resuming it returns that answer again."""
    new_start: int = 0
    """Index of the run's first own message (after system prompt, examples and history)."""
    memory_mark: int = 0
    """Index of the first message not yet written to the session's memory."""
    output_attempts: int = 0
    """Structured-output answers refused so far."""
    text: str | None = None
    """The answer of a completed run."""
    kind: Literal["run_progress"] = field(default="run_progress", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointState:
    """A snapshot of a run, taken after each model response and each tool result."""

    run_id: str
    messages: tuple[Message, ...] = ()
    iteration: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    pending_tool_calls: tuple[ToolCall, ...] = ()
    """Calls the model asked for that have no result yet."""
    completed_tool_results: dict[str, ToolOutput] = field(default_factory=dict[str, ToolOutput])
    """Results by call id, so a resumed run never runs a finished call twice."""
    custom: dict[str, Any] = field(default_factory=dict[str, Any])
    """Anything else the caller wants kept (JSON values only)."""
    session_id: str | None = None
    progress: RunProgress | None = None
    """An agent run's own bookkeeping (``None`` in states that flows and callers write)."""
    kind: Literal["checkpoint_state"] = field(default="checkpoint_state", init=False, repr=False)
