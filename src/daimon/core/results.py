"""The result of an agent run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from daimon.core._fastinit import fast_init
from daimon.core.chat import Usage
from daimon.core.checkpoints import CheckpointState
from daimon.core.messages import Message, ToolCall

__all__ = ("AgentResponse", "ApprovalDecision", "ApprovalRequest")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequest:
    """A tool call waiting for a person to approve or reject it."""

    id: str
    """Stable across retries and resumes: the id of the call it is about."""
    call: ToolCall
    run_id: str
    kind: Literal["approval_request"] = field(default="approval_request", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecision:
    """A person's answer to an :class:`ApprovalRequest`."""

    approved: bool
    reason: str | None = None
    """Why, shown to the model when a call is rejected."""
    kind: Literal["approval_decision"] = field(default="approval_decision", init=False, repr=False)

    @classmethod
    def approve(cls) -> ApprovalDecision:
        """Let the call run."""
        return cls(approved=True)

    @classmethod
    def reject(cls, reason: str | None = None) -> ApprovalDecision:
        """Do not run the call; the model is told it was rejected (and why)."""
        return cls(approved=False, reason=reason)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class AgentResponse:
    """What a finished run returns."""

    text: str
    """The final answer."""
    messages: tuple[Message, ...] = ()
    """Every message of the run: the prompt, each model turn and each tool result."""
    iterations: int = 0
    """How many model calls the run made."""
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    """Dollars spent, when the agent has a cost model."""
    run_id: str = ""
    session_id: str | None = None
    output: Any = None
    """A typed result, for runs that ask for structured output."""
    pending_approvals: tuple[ApprovalRequest, ...] = ()
    """Tool calls waiting for approval: the run is paused until they are decided."""
    state: CheckpointState | None = None
    """For a paused run: everything needed to resume it, even without a checkpoint store."""
    kind: Literal["agent_response"] = field(default="agent_response", init=False, repr=False)

    @property
    def paused(self) -> bool:
        """Whether the run is waiting for approvals rather than finished."""
        return bool(self.pending_approvals)
