"""What a worker needs from a broker: leased deliveries with attempt fencing.

:class:`daimon.core.TaskBroker` hands out bare tasks and settles them by task id; a worker that
loses no task needs more: a handle per delivery (so two deliveries of one task are told apart),
heartbeats, hand-back, cancellation and an attempt number that fences stale writes. These
protocols are structural, like core's: broker plugins implement them without importing this
module. They are proposed for ``daimon.core.protocols``.

The life of a task::

    submit ──> PENDING ──claim──> RUNNING ──complete──> COMPLETED
                  ^  ^ ^             │ ──fail──────────> FAILED (dead-lettered)
                  │  │ └release/retry┤ ──lease lost, attempts spent──> FAILED (dead-lettered)
                  │  │               ├─lease lost──> (redelivered: attempt + 1)
                  │  └──decide─── PAUSED <──pause  (the run waits for approvals)
                  └──────────────── cancel ────────> CANCELLED (from PENDING, RUNNING, PAUSED)

Every claim starts a new attempt. Only the newest attempt may settle a task, and a task settles
once: a write from a stale attempt, or after the task ended, is refused (``False``). A paused
task keeps its run's state in the broker (versioned JSON); ``decide`` queues it again carrying
that state and the decisions (:attr:`AgentTask.resume`), for any worker to resume. A pause
uses up no attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from daimon.core.results import ApprovalDecision
from daimon.kit.task_records import DeadLetter
from daimon.core.tasks import AgentTask, TaskPause, TaskResult, TaskStatus

__all__ = ("Broker", "DeadLetter", "Delivery")


@runtime_checkable
class Delivery(Protocol):
    """One delivery of a task to one worker: a lease on it, renewed by heartbeats."""

    @property
    def task(self) -> AgentTask:
        """The task, with ``attempt`` set to this delivery's attempt number (from 1)."""
        ...

    async def heartbeat(self) -> bool:
        """Renew the lease; ``False`` when this attempt must stop (cancelled, or superseded)."""
        ...

    async def complete(self, result: TaskResult) -> bool:
        """Record the result and acknowledge; ``False`` when refused (stale or already ended)."""
        ...

    async def pause(self, paused: TaskPause) -> bool:
        """Record that the run waits for approvals (status ``PAUSED``); ``False`` when refused."""
        ...

    async def fail(self, error: str, *, retry: bool = False, delay: float = 0.0) -> bool:
        """Record a failure; ``False`` when refused.

        With ``retry`` the task goes back to the queue for another attempt after ``delay``
        seconds, unless this was its last allowed attempt: then it is dead-lettered.
        Without ``retry`` it is dead-lettered at once.
        """
        ...

    async def release(self) -> None:
        """Hand the task back undone (a graceful shutdown); the attempt does not count."""
        ...


@runtime_checkable
class Broker(Protocol):
    """Queues tasks durably and leases them to workers (at-least-once)."""

    @property
    def lease(self) -> float:
        """Seconds a delivery stays leased without a heartbeat."""
        ...

    @property
    def max_deliver(self) -> int:
        """Attempts a task gets before it is dead-lettered."""
        ...

    async def submit(self, task: AgentTask) -> str:
        """Queue a task durably (returns once the broker holds it); its id. Idempotent by id."""
        ...

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` for an unknown id."""
        ...

    async def cancel(self, task_id: str) -> bool:
        """Cancel a pending, running or paused task; whether it was (``False``: it had ended)."""
        ...

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        """Answer a paused task's approvals (by ``ApprovalRequest.id``); it is queued to resume.

        Any subset may be decided: a call left undecided pauses the run again. ``False`` when
        the task was not paused (decided already, or ended); :class:`KeyError` when unknown.
        """
        ...

    async def claim(self, wait: float = 1.0) -> Delivery | None:
        """The next task for this worker, waiting up to ``wait`` seconds; ``None`` if none."""
        ...

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` (1 to 10,000) dead-lettered tasks, oldest first.

        An inspection: nothing listed is removed or queued again.
        """
        ...

    async def aclose(self) -> None:
        """Close the connections; leases held by this handle are left to expire."""
        ...
