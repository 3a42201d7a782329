"""A task broker inside one process, for tests and local development.

It keeps the full contract of the networked brokers (leases, attempt fencing, dead-lettering,
cancellation) so a worker can be tested without a service, but nothing survives the process.
Every handle made with :meth:`MemoryBroker.handle` shares the same queue; closing a handle
abandons its deliveries, as a crashed worker would, and they come back when their lease runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import deque
from collections.abc import Mapping

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError, DaimonError
from daimon.core.results import ApprovalDecision
from daimon.core.tasks import AgentTask, DeadLetter, TaskPause, TaskResult, TaskStatus
from daimon.kit.task_records import (
    SettleByTaskId,
    SettlingDelivery,
    TaskRecord,
    as_decisions,
    begin,
    cancel,
    check_dead_letter_limit,
    check_options,
    decide,
    heartbeat,
    resumed_payload,
    settle,
    view,
)

__all__ = ("MemoryBroker",)

# --- The broker.


class _Queue:
    """What every handle of one :class:`MemoryBroker` shares."""

    def __init__(self) -> None:
        self.records: dict[str, TaskRecord] = {}
        self.tasks: dict[str, AgentTask] = {}
        self.ready: deque[str] = deque()
        self.leased: dict[str, float] = {}
        """Task ids handed out and not yet acknowledged -> when they come back if not renewed."""
        self.dead: list[DeadLetter] = []
        self.wakeup = asyncio.Event()

    def take(self, now: float, lease: float) -> str | None:
        for task_id, visible_at in self.leased.items():
            if visible_at <= now:
                self.leased[task_id] = now + lease
                return task_id
        if self.ready:
            task_id = self.ready.popleft()
            self.leased[task_id] = now + lease
            return task_id
        return None

    def next_visible(self) -> float | None:
        return min(self.leased.values(), default=None)

    def ack(self, task_id: str) -> None:
        self.leased.pop(task_id, None)

    def dead_letter(self, task_id: str) -> None:
        self.ack(task_id)
        rec = self.records[task_id]
        self.dead.append(
            DeadLetter(
                task=self.tasks[task_id],
                reason=rec.error or "",
                attempts=rec.attempt - rec.released,
                dead_at=time.time(),
            )
        )

    def notify(self) -> None:
        self.wakeup.set()


class MemoryBroker(SettleByTaskId):
    """Queues tasks in this process's memory; see the module docstring.

    Args:
        lease: Seconds a delivery stays leased without a heartbeat.
        max_deliver: Attempts a task gets before it is dead-lettered.
    """

    def __init__(
        self, *, lease: float = 30.0, max_deliver: int = 5, _queue: _Queue | None = None
    ) -> None:
        check_options(lease, max_deliver)
        self._lease = float(lease)
        self._max_deliver = max_deliver
        self._queue = _queue if _queue is not None else _Queue()
        self._closed = False
        self._held: dict[str, _MemoryDelivery] = {}

    @classmethod
    def from_url(cls, url: str = "memory://", **options: float) -> MemoryBroker:
        """A new broker (the URL is ``memory://``; every call makes a separate queue)."""
        if not url.startswith("memory:"):
            raise BuilderError(f"not a memory broker URL: {url!r}")
        return cls(**options)  # type: ignore[arg-type]

    def handle(self, *, lease: float | None = None, max_deliver: int | None = None) -> MemoryBroker:
        """Another handle on the same queue, as a second worker process would have."""
        return MemoryBroker(
            lease=self._lease if lease is None else lease,
            max_deliver=self._max_deliver if max_deliver is None else max_deliver,
            _queue=self._queue,
        )

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks, oldest first (none is removed)."""
        self._check_open()
        return self._queue.dead[: check_dead_letter_limit(limit)]

    async def aclose(self) -> None:
        """Close this handle; deliveries it holds come back when their lease runs out."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise DaimonError("the broker handle is closed")

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task``; a task id already submitted is not queued again."""
        self._check_open()
        dumps(task)  # refuse what a networked broker could not carry, as they do
        queue = self._queue
        if task.task_id not in queue.records:
            queue.records[task.task_id] = TaskRecord()
            queue.tasks[task.task_id] = task
            queue.ready.append(task.task_id)
            queue.notify()
        return task.task_id

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when it was never submitted."""
        self._check_open()
        return view(self._queue.records[task_id], time.monotonic())

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; whether it was cancelled."""
        self._check_open()
        queue = self._queue
        if not cancel(queue.records[task_id]):
            return False
        if task_id in queue.ready:
            queue.ready.remove(task_id)
        return True

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        """Queue a paused task again with ``decisions``; whether it was paused."""
        self._check_open()
        queue = self._queue
        pause = decide(queue.records[task_id])
        if pause is None:
            return False
        # Through the codec, as a networked broker's message goes.
        queue.tasks[task_id] = loads(resumed_payload(pause, as_decisions(decisions)), AgentTask)
        queue.ready.append(task_id)
        queue.notify()
        return True

    async def claim(self, wait: float = 1.0) -> _MemoryDelivery | None:
        """The next task, waiting up to ``wait`` seconds for one."""
        queue = self._queue
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            self._check_open()
            now = time.monotonic()
            task_id = queue.take(now, self._lease)
            if task_id is not None:
                record = queue.records[task_id]
                outcome, value = begin(record, now, self._lease, self._max_deliver)
                if outcome == "run":
                    task = dataclasses.replace(queue.tasks[task_id], attempt=int(value))
                    return _MemoryDelivery(self, task)
                if outcome == "busy":
                    queue.leased[task_id] = now + value
                elif outcome == "dead":
                    queue.dead_letter(task_id)
                else:
                    queue.ack(task_id)
                continue
            if now >= deadline:
                return None
            pause = deadline - now
            visible = queue.next_visible()
            if visible is not None:
                pause = min(pause, max(visible - now, 0.001))
            queue.wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(queue.wakeup.wait(), pause)


class _MemoryDelivery(SettlingDelivery):
    __slots__ = ("_broker", "task")

    def __init__(self, broker: MemoryBroker, task: AgentTask) -> None:
        self._broker = broker
        self.task = task

    def _record(self) -> TaskRecord:
        self._broker._check_open()
        return self._broker._queue.records[self.task.task_id]

    async def heartbeat(self) -> bool:
        lease = self._broker._lease
        outcome = heartbeat(self._record(), self.task.attempt, time.monotonic(), lease)
        if outcome == "ok":
            self._broker._queue.leased[self.task.task_id] = time.monotonic() + lease
        return outcome == "ok"

    async def _settle(
        self,
        action: str,
        *,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        paused: TaskPause | None = None,
    ) -> str:
        for data in (result, paused):
            if data is not None:
                dumps(data)  # refuse what a networked broker could not store, as they do
        queue = self._broker._queue
        task_id = self.task.task_id
        max_deliver = self._broker._max_deliver
        outcome = settle(
            self._record(),
            self.task.attempt,
            action,
            max_deliver,
            result=result,
            error=error,
            paused=paused,
        )
        if outcome == "stale":
            return outcome
        if outcome in ("requeued", "released"):
            queue.leased[task_id] = time.monotonic() + max(delay, 0.0)
            queue.notify()
        elif outcome == "dead":
            queue.dead_letter(task_id)
        else:
            queue.ack(task_id)
        return outcome
