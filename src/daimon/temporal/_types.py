"""The values that cross Temporal: a run's request, activity inputs and results, its status.

All are frozen dataclasses that :mod:`daimon.core.codec` encodes (through the payload
converter in :mod:`daimon.temporal._converter`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from daimon.core.chat import ChatRequest, Usage
from daimon.core.checkpoints import CheckpointState, EffectRecord
from daimon.core.errors import BuilderError
from daimon.core.events import StreamEvent
from daimon.core.messages import Message, ToolCall
from daimon.core.results import AgentResponse, ApprovalRequest
from daimon.core.tools import ToolOutput

__all__ = (
    "ActivityOptions",
    "Decision",
    "EventPage",
    "ModelCallInput",
    "PromptInput",
    "RunRequest",
    "RunStatus",
    "ToolCallInput",
    "ToolCallResult",
    "WORKFLOW_NAME",
)

WORKFLOW_NAME = "daimon.agent"
"""The workflow type of a daimon run."""

RunPhase = Literal["running", "awaiting_approval", "completed", "failed", "cancelled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivityOptions:
    """How the workflow runs each model call and tool call as a Temporal activity.

    Temporal retries an activity that failed, timed out or lost its worker, with exponential
    backoff (``initial_interval`` doubled by ``backoff`` up to ``max_interval``), at most
    ``max_attempts`` times (``0``: until its timeout). A tool's own error is not a failure: it
    is a result the model reads, as in a plain run. A ``SerializationError`` (a value Temporal
    cannot carry) is never retried. Each activity heartbeats every ``HEARTBEAT`` (2) seconds,
    which is how a cancellation reaches it; one that misses ``heartbeat_timeout`` seconds (its
    worker died) is run again on another worker. Not a tool call whose tool declares
    ``effect="once"`` or ``"ask"``: its activity has one attempt (its tool's own errors are
    retried within it), and a lost one leaves the call in doubt, decided as the tool declared.
    """

    model_timeout: float = 300.0
    """Seconds one model call may take (per attempt)."""
    tool_timeout: float = 300.0
    """Seconds one tool call may take (per attempt)."""
    heartbeat_timeout: float = 30.0
    """Seconds without a heartbeat before Temporal counts the attempt as lost."""
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 60.0
    max_attempts: int = 0

    def __post_init__(self) -> None:
        for name in ("model_timeout", "tool_timeout", "heartbeat_timeout", "initial_interval"):
            value = getattr(self, name)
            if not value > 0:
                raise BuilderError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.backoff < 1:
            raise BuilderError(f"backoff must be >= 1, got {self.backoff!r}")
        if self.max_attempts < 0:
            raise BuilderError(f"max_attempts must be >= 0, got {self.max_attempts!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    """What starts a run's workflow: which agent, on what, with which options."""

    agent: str
    """The agent's name, as the worker registered it."""
    prompt: str
    run_id: str | None = None
    """The run's id (tools' ``ctx.run_id``); the workflow id when not given."""
    instructions: str | None = None
    history: tuple[Message, ...] = ()
    deps: Any = None
    """JSON data: decoded as the agent's ``deps_type`` in the worker; else the worker's deps."""
    options: ActivityOptions = field(default_factory=ActivityOptions)
    continue_after: int = 5000
    """History events after which the run continues as a new workflow run (same workflow id):
    at its next model call, or while it waits for approval. Temporal's own suggestion
    (``is_continue_as_new_suggested``) triggers it too."""
    paused: AgentResponse | None = None  # no [Any]: the codec decodes plain classes
    """Set by continue-as-new: the paused run this workflow run carries on."""
    resume: CheckpointState | None = None
    """Set by continue-as-new: the checkpoint of the run in progress this workflow run goes on
    from (taken between two turns: no call pending)."""
    events_before: int = 0
    """Set by continue-as-new: stream events recorded before those in ``events``."""
    events: tuple[StreamEvent, ...] = ()
    """Set by continue-as-new: the newest stream events of the earlier workflow runs (at most
    ``CARRIED_EVENTS``), so a polling client misses none of them."""
    pausable: bool = True
    """Whether the run may wait for approvals; a sub-agent's may not (as in a plain run, a
    sub-agent that needs an approval fails with ``ApprovalRequiredError``)."""
    calls_before: int = 0
    """Set by continue-as-new: activities the earlier workflow runs called (ids go on from it)."""
    kind: Literal["temporal_run_request"] = field(default="temporal_run_request", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallInput:
    """One model call: the agent (by name) and the request its loop built."""

    agent: str
    request: ChatRequest
    kind: Literal["temporal_model_call"] = field(default="temporal_model_call", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptInput:
    """A whole run of a team or flow (anything promptable but an Agent), as one activity."""

    agent: str
    prompt: str
    run_id: str
    instructions: str | None = None
    options: ActivityOptions = field(default_factory=ActivityOptions)
    """How the agents the flow's nodes prompt run their calls (each run a workflow)."""
    kind: Literal["temporal_prompt"] = field(default="temporal_prompt", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallInput:
    """One tool call, with the run-level fields its ``RunContext`` shows the tool."""

    agent: str
    call: ToolCall
    run_id: str
    iteration: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    messages: tuple[Message, ...] = ()
    deps: Any = None
    kind: Literal["temporal_tool_call"] = field(default="temporal_tool_call", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallResult:
    """A tool call's result; the usage it reported; whether it ended the run (``EndRun``)."""

    output: ToolOutput
    usage: Usage | None = None
    cost: float = 0.0
    ended: bool = False
    end_text: str | None = None
    end_output: Any = None
    kind: Literal["temporal_tool_result"] = field(default="temporal_tool_result", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """A person's answer to one pending approval, sent to the run's workflow."""

    approval_id: str
    approved: bool
    reason: str | None = None
    kind: Literal["temporal_decision"] = field(default="temporal_decision", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class EventPage:
    """Stream events of a run, the first of them its ``start``-th (counted from the run's start)."""

    start: int
    events: tuple[StreamEvent, ...] = ()
    kind: Literal["temporal_event_page"] = field(default="temporal_event_page", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStatus:
    """A run's state as a query reads it."""

    phase: RunPhase
    iteration: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    messages: tuple[Message, ...] = ()
    pending_approvals: tuple[ApprovalRequest, ...] = ()
    events: int = 0
    """How many stream events the run has recorded (see the ``events`` query)."""
    effects: dict[str, EffectRecord] = field(default_factory=dict[str, EffectRecord])
    """The run's effect ledger (``RunContext.effects``): each call of a tool that declares an
    effect, by call id, and where it stands (started, completed, in doubt, skipped)."""
    kind: Literal["temporal_run_status"] = field(default="temporal_run_status", init=False)
