"""Tasks handed to workers through a task broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from daimon.core.chat import Usage

__all__ = ("AgentTask", "TaskResult", "TaskState", "TaskStatus")


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
    kind: Literal["agent_task"] = field(default="agent_task", init=False, repr=False)


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
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatus:
    """A task's state, with its result when completed or its error when failed."""

    state: TaskState
    result: TaskResult | None = None
    error: str | None = None
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
