"""The result of an agent run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal

from daimon.core._added import ADDED
from daimon.core._fastinit import fast_init
from daimon.core.chat import Usage
from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import ApprovalRequiredError
from daimon.core.messages import Message, ToolCall

__all__ = ("AgentResponse", "ApprovalDecision", "ApprovalRequest")

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    OutputT = TypeVar("OutputT", default=Any, covariant=True)
else:  # typing.TypeVar takes no default before Python 3.13; only type checkers read it
    from typing import TypeVar

    OutputT = TypeVar("OutputT", covariant=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequest:
    """A tool call waiting for a person to approve or reject it."""

    id: str
    """Stable across retries and resumes: the id of the call it is about."""
    call: ToolCall
    run_id: str
    in_doubt: bool = field(default=False, metadata=ADDED)
    """The call started before and its outcome is unknown (its tool's effect is ``ask``): approving
    runs it again, rejecting tells the model it was not."""
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


@fast_init  # hot: one per run (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class AgentResponse(Generic[OutputT]):
    """What a run returns: its answer (``output``, and ``text``), messages, usage and cost.

    ``AgentResponse[OutputT]`` is typed by the agent that made it: ``output`` is the agent's
    ``output_type`` (a ``str``, the answer's text, for a text agent). A paused run (``paused``)
    has no answer yet: its ``text`` is empty and its ``output`` is ``None`` until it is resumed.
    """

    text: str
    """The final answer as text (a structured answer's JSON)."""
    messages: tuple[Message, ...] = ()
    """Every message of the run: the prompt, each model turn and each tool result."""
    iterations: int = 0
    """How many model calls the run made."""
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    """Dollars spent, when the agent has a cost model."""
    run_id: str = ""
    session_id: str | None = None
    output: OutputT = None  # type: ignore[assignment]  # set by every finished run
    """The answer: an instance of the agent's ``output_type``, else the text."""
    pending_approvals: tuple[ApprovalRequest, ...] = ()
    """Tool calls waiting for approval: the run is paused until they are decided."""
    client_calls: tuple[ToolCall, ...] = ()
    """Calls of client tools waiting for the caller's results: the run is paused until then."""
    state: CheckpointState | None = None
    """For a paused run: everything needed to resume it, even without a checkpoint store."""
    kind: Literal["agent_response"] = field(default="agent_response", init=False, repr=False)

    @property
    def paused(self) -> bool:
        """Whether the run is waiting (for approvals, or client results) rather than finished."""
        return bool(self.pending_approvals or self.client_calls)

    def require_finished(self, where: str) -> AgentResponse[OutputT]:
        """This response, if the run finished: the one rule for callers that cannot pause.

        Args:
            where: Who cannot ask for approvals, for the message ("the MCP server", ...).

        Raises:
            ApprovalRequiredError: The run paused for approvals.
        """
        if self.pending_approvals:
            raise ApprovalRequiredError(self.pending_approvals, where)
        return self
