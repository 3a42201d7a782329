r"""Tasks handed to workers through a task broker.

A task whose run pauses for approval reads :attr:`TaskState.PAUSED`, its status carrying the
pending :class:`~daimon.core.results.ApprovalRequest`\ s; the broker keeps the run's state (a
:class:`TaskPause`) until a client sends decisions (``Broker.decide``), which queues the task
again carrying a :class:`TaskResume` for the worker that takes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from daimon.core.chat import Usage
from daimon.core.checkpoints import CheckpointState
from daimon.core.results import ApprovalDecision, ApprovalRequest

__all__ = (
    "AgentTask",
    "DeadLetter",
    "TaskPause",
    "TaskResult",
    "TaskResume",
    "TaskState",
    "TaskStatus",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskResume:
    """How a paused task goes on: the state its run paused in, and the decisions sent for it."""

    state: CheckpointState
    decisions: dict[str, ApprovalDecision] = field(default_factory=dict[str, ApprovalDecision])
    """Decisions by approval id; a call left undecided pauses the run again."""
    kind: Literal["task_resume"] = field(default="task_resume", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentTask:
    """A prompt to run on some worker."""

    task_id: str
    input: str
    run_id: str | None = None
    """Resume this run's checkpoint when the task is delivered again."""
    session_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    attempt: int = 1
    """Which delivery this is, counting from 1."""
    resume: TaskResume | None = None
    """Set when decisions resume a paused run: the worker resumes it instead of prompting."""
    kind: Literal["agent_task"] = field(default="agent_task", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPause:
    """A task whose run paused for approval, as its broker keeps it until decisions come."""

    task: AgentTask
    """The task as the attempt that paused had it (``attempt`` is that attempt's number)."""
    approvals: tuple[ApprovalRequest, ...]
    state: CheckpointState
    """Everything needed to resume the run (versioned JSON, so any worker can)."""
    kind: Literal["task_pause"] = field(default="task_pause", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskResult:
    """What a worker produced for a task."""

    task_id: str
    output: str = ""
    iterations: int = 0
    cost: float = 0.0
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    kind: Literal["task_result"] = field(default="task_result", init=False, repr=False)


class TaskState(StrEnum):
    """Where a task is in its life."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    """Its run waits for approvals: send decisions with ``Broker.decide``."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatus:
    """A task's state: its result when completed, error when failed, approvals when paused."""

    state: TaskState
    result: TaskResult | None = None
    error: str | None = None
    approvals: tuple[ApprovalRequest, ...] = ()
    """For a paused task: the tool calls waiting for a decision, by ``id``."""
    kind: Literal["task_status"] = field(default="task_status", init=False, repr=False)

    @classmethod
    def pending(cls) -> TaskStatus:
        """Submitted, not yet picked up."""
        return cls(state=TaskState.PENDING)

    @classmethod
    def running(cls) -> TaskStatus:
        """A worker is on it."""
        return cls(state=TaskState.RUNNING)

    @classmethod
    def paused(cls, approvals: tuple[ApprovalRequest, ...]) -> TaskStatus:
        """Waiting for a person to decide these tool calls."""
        return cls(state=TaskState.PAUSED, approvals=approvals)

    @classmethod
    def completed(cls, result: TaskResult) -> TaskStatus:
        """Done, with its result."""
        return cls(state=TaskState.COMPLETED, result=result)

    @classmethod
    def failed(cls, error: str) -> TaskStatus:
        """Given up on, with why."""
        return cls(state=TaskState.FAILED, error=error)

    @classmethod
    def cancelled(cls) -> TaskStatus:
        """Cancelled by a client."""
        return cls(state=TaskState.CANCELLED)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A dead-lettered task, as :meth:`daimon.core.Broker.dead_letters` lists it."""

    task: AgentTask
    reason: str
    """Why it was dead-lettered (the error its status carries)."""
    attempts: int = 0
    """Attempts it had spent (``0`` when the broker cannot tell)."""
    dead_at: float = 0.0
    """When it was dead-lettered, in epoch seconds (``0.0`` when the broker cannot tell)."""
