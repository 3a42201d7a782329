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
from dataclasses import dataclass

from daimon.core.codec import dumps
from daimon.core.errors import BuilderError, DaimonError
from daimon.core.tasks import AgentTask, TaskResult, TaskState, TaskStatus

__all__ = ("MemoryBroker",)

# --- The task record's state machine. The same code is in daimon.distributed.brokers.nats (plugins
# --- cannot share modules); proposed for daimon.core as task_records.py.

_TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(slots=True)
class _Record:
    state: str = "pending"
    attempt: int = 0
    """Deliveries started so far; the newest one alone may settle the task."""
    released: int = 0
    """Deliveries handed back undone (graceful shutdowns): they do not count against max_deliver."""
    lease_until: float = 0.0
    result: TaskResult | None = None
    error: str | None = None


def _begin(rec: _Record, now: float, lease: float, max_deliver: int) -> tuple[str, float]:
    """Start an attempt: ``run`` (its number), ``skip`` (ended), ``busy`` (lease left), ``dead``."""
    if rec.state in _TERMINAL:
        return "skip", 0.0
    if rec.state == "running" and rec.lease_until > now:
        return "busy", rec.lease_until - now
    spent = rec.attempt - rec.released
    if spent >= max_deliver:
        if rec.state == "running":
            why = (
                f"attempt {rec.attempt} was lost: no heartbeat within the {lease:g}s lease "
                "(its worker crashed or hung)"
            )
        else:
            why = f"last error: {rec.error}"
        rec.state, rec.error = "failed", f"dead-lettered after {spent} attempts; {why}"
        return "dead", 0.0
    rec.attempt += 1
    rec.state, rec.lease_until = "running", now + lease
    return "run", float(rec.attempt)


def _heartbeat(rec: _Record, attempt: int, now: float, lease: float) -> str:
    """Renew the lease: ``ok``, ``cancelled`` or ``lost`` (another attempt owns the task)."""
    if rec.attempt != attempt:
        return "lost"
    if rec.state != "running":
        return "cancelled" if rec.state == "cancelled" else "lost"
    rec.lease_until = now + lease
    return "ok"


def _settle(
    rec: _Record,
    attempt: int,
    action: str,
    max_deliver: int,
    *,
    result: TaskResult | None = None,
    error: str = "",
) -> str:
    """End an attempt: ``ok``, ``requeued``, ``released``, ``dead``, ``stale`` or ``ended``."""
    if rec.attempt != attempt:
        return "stale"
    if rec.state != "running":
        return "ended"
    if action == "complete":
        rec.state, rec.result, rec.error = "completed", result, None
        return "ok"
    if action == "release":
        rec.state, rec.released = "pending", rec.released + 1
        return "released"
    spent = rec.attempt - rec.released
    if action == "retry":
        if spent < max_deliver:
            rec.state, rec.error = "pending", error
            return "requeued"
        error = f"dead-lettered after {spent} attempts; last error: {error}"
    rec.state, rec.error = "failed", error
    return "dead"


def _cancel(rec: _Record) -> bool:
    if rec.state in _TERMINAL:
        return False
    rec.state = "cancelled"
    return True


def _view(rec: _Record, now: float) -> TaskStatus:
    state = rec.state
    if state == "running" and rec.lease_until <= now:
        state = "pending"  # its worker is gone: the task waits for another one
    return TaskStatus(state=TaskState(state), result=rec.result, error=rec.error)


# --- The broker.


class _Queue:
    """What every handle of one :class:`MemoryBroker` shares."""

    def __init__(self) -> None:
        self.records: dict[str, _Record] = {}
        self.tasks: dict[str, AgentTask] = {}
        self.ready: deque[str] = deque()
        self.leased: dict[str, float] = {}
        """Task ids handed out and not yet acknowledged -> when they come back if not renewed."""
        self.dead: list[AgentTask] = []
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
        self.dead.append(self.tasks[task_id])

    def notify(self) -> None:
        self.wakeup.set()


class MemoryBroker:
    """Queues tasks in this process's memory; see the module docstring.

    Args:
        lease: Seconds a delivery stays leased without a heartbeat.
        max_deliver: Attempts a task gets before it is dead-lettered.
    """

    def __init__(
        self, *, lease: float = 30.0, max_deliver: int = 5, _queue: _Queue | None = None
    ) -> None:
        if lease <= 0:
            raise BuilderError(f"lease must be positive, got {lease!r}")
        if type(max_deliver) is not int or max_deliver < 1:
            raise BuilderError(f"max_deliver must be a positive integer, got {max_deliver!r}")
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

    @property
    def lease(self) -> float:
        """Seconds a delivery stays leased without a heartbeat."""
        return self._lease

    @property
    def max_deliver(self) -> int:
        """Attempts a task gets before it is dead-lettered."""
        return self._max_deliver

    @property
    def dead_letters(self) -> list[AgentTask]:
        """The dead-lettered tasks, oldest first."""
        return list(self._queue.dead)

    async def __aenter__(self) -> MemoryBroker:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

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
            queue.records[task.task_id] = _Record()
            queue.tasks[task.task_id] = task
            queue.ready.append(task.task_id)
            queue.notify()
        return task.task_id

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when it was never submitted."""
        self._check_open()
        return _view(self._queue.records[task_id], time.monotonic())

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; whether it was cancelled."""
        self._check_open()
        queue = self._queue
        if not _cancel(queue.records[task_id]):
            return False
        if task_id in queue.ready:
            queue.ready.remove(task_id)
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
                outcome, value = _begin(record, now, self._lease, self._max_deliver)
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

    # --- daimon.core.TaskBroker, for callers that settle by task id.

    async def receive(self) -> AgentTask | None:
        """Claim the next task (waiting up to a second); settle it with ``complete``/``fail``."""
        delivery = await self.claim(wait=1.0)
        if delivery is None:
            return None
        self._held[delivery.task.task_id] = delivery
        return delivery.task

    async def complete(self, task_id: str, result: TaskResult) -> None:
        """Record the result of a task this handle received."""
        await self._held.pop(task_id).complete(result)

    async def fail(self, task_id: str, error: str) -> None:
        """Record the failure of a task this handle received (dead-lettering it)."""
        await self._held.pop(task_id).fail(error)


class _MemoryDelivery:
    __slots__ = ("_broker", "task")

    def __init__(self, broker: MemoryBroker, task: AgentTask) -> None:
        self._broker = broker
        self.task = task

    def __repr__(self) -> str:
        return f"<delivery of {self.task.task_id!r}, attempt {self.task.attempt}>"

    def _record(self) -> _Record:
        self._broker._check_open()
        return self._broker._queue.records[self.task.task_id]

    async def heartbeat(self) -> bool:
        lease = self._broker._lease
        outcome = _heartbeat(self._record(), self.task.attempt, time.monotonic(), lease)
        if outcome == "ok":
            self._broker._queue.leased[self.task.task_id] = time.monotonic() + lease
        return outcome == "ok"

    async def complete(self, result: TaskResult) -> bool:
        return self._settle("complete", result=result)

    async def fail(self, error: str, *, retry: bool = False, delay: float = 0.0) -> bool:
        return self._settle("retry" if retry else "fail", error=error, delay=delay)

    async def release(self) -> None:
        self._settle("release")

    def _settle(
        self,
        action: str,
        *,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
    ) -> bool:
        if result is not None:
            dumps(result)
        queue = self._broker._queue
        task_id = self.task.task_id
        max_deliver = self._broker._max_deliver
        outcome = _settle(
            self._record(), self.task.attempt, action, max_deliver, result=result, error=error
        )
        if outcome == "stale":
            return False
        if outcome in ("requeued", "released"):
            queue.leased[task_id] = time.monotonic() + max(delay, 0.0)
            queue.notify()
        elif outcome == "dead":
            queue.dead_letter(task_id)
        else:
            queue.ack(task_id)
        return outcome not in ("ended", "released")
