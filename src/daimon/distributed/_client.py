"""The submitting side: make tasks that carry a trace, and wait for their outcome."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

from daimon.core.ids import check_id
from daimon.core.protocols import Broker
from daimon.core.tasks import AgentTask, TaskState, TaskStatus
from daimon.distributed._trace import TRACEPARENT, child_traceparent, current_traceparent

__all__ = ("new_task", "wait_for_task")

_SETTLED = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED, TaskState.PAUSED})


def new_task(
    input: str,
    *,
    task_id: str | None = None,
    run_id: str | None = None,
    session_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> AgentTask:
    """An :class:`AgentTask` with a fresh id and a W3C ``traceparent`` in its metadata.

    The trace continues the current task's when called on a worker, else it starts a new one; a
    ``traceparent`` given in ``metadata`` is kept as it is.

    Raises:
        InvalidIdError: ``task_id`` cannot name a task (see :func:`daimon.core.ids.check_id`).
    """
    data = dict(metadata or {})
    data.setdefault(TRACEPARENT, child_traceparent(current_traceparent()))
    return AgentTask(
        task_id=uuid.uuid4().hex if task_id is None else check_id("task", task_id),
        input=input,
        run_id=run_id,
        session_id=session_id,
        metadata=data,
    )


async def wait_for_task(broker: Broker, task_id: str, *, poll: float = 0.05) -> TaskStatus:
    """Poll ``status`` until the task has ended (completed, failed or cancelled) or paused.

    A paused task waits for a person: its status carries the ``approvals`` to answer with
    ``broker.decide``. Polls quickly at first, then every ``poll`` seconds. Bound the wait with
    ``asyncio.timeout(...)``.
    """
    pause = min(poll, 0.005)
    while True:
        status = await broker.status(task_id)
        if status.state in _SETTLED:
            return status
        await asyncio.sleep(pause)
        pause = min(pause * 2, poll)
