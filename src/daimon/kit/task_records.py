r"""A task's record in a broker: the state machine every broker shares, and the pieces around it.

A broker keeps one record per task: its state, how many attempts started (and how many were
handed back undone), the lease of the running attempt, and the result or error. The functions
here change a record in memory; a broker loads it, calls one, and stores it back atomically
(a compare-and-set, a transaction, or one Lua script that mirrors these rules)::

    submit ──> pending ──begin──> running ──settle(complete)──> completed
                  ^  ^ ^             │ ──settle(fail)──────────> failed (dead-lettered)
                  │  │ └release/retry┤ ──lease lost, attempts spent──> failed (dead-lettered)
                  │  │               ├─lease lost──> (begin again: attempt + 1)
                  │  └──decide──── paused <──settle(pause)  (waits for approvals)
                  └────────────── cancel ────────> cancelled (from pending, running or paused)

Every ``begin`` starts a new attempt; only the newest attempt may settle a task, and a task
settles once. :class:`TaskStore` is what a broker whose service cannot hold records (RabbitMQ,
SQS, Pub/Sub, Service Bus) asks of the store that does; :class:`SettlingDelivery` and
:class:`StoreDelivery` are the delivery code those brokers share, and :func:`submit_through` their
submit (which withdraws the record of a task whose message could not be sent). The
``dead_letter_*`` helpers are how every broker lists its :class:`~daimon.core.DeadLetter`\ s.
:class:`BrokerBoundary`, a base of every broker handle, delivery and the Redis task store, makes
each operation raise :class:`~daimon.core.errors.BrokerError` for whatever the client library
raises when its service fails or cannot be reached. Standard library only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self

from daimon.core.codec import dumps, loads
from daimon.core.errors import BrokerError, BuilderError, DaimonError, SerializationError
from daimon.core.ids import check_id
from daimon.core.results import ApprovalDecision
from daimon.core.tasks import (
    AgentTask,
    DeadLetter,
    TaskPause,
    TaskResult,
    TaskResume,
    TaskState,
    TaskStatus,
)
from daimon.kit.checks import check_positive

__all__ = (
    "BrokerBoundary",
    "BrokerHandle",
    "MAX_DEAD_LETTERS",
    "SettleByTaskId",
    "SettlingDelivery",
    "StoreBackedBroker",
    "StoreDelivery",
    "TERMINAL",
    "TaskRecord",
    "TaskStore",
    "as_decisions",
    "begin",
    "cancel",
    "check_dead_letter_limit",
    "check_options",
    "dead_letter_attempts",
    "dead_letter_from_store",
    "dead_letter_task",
    "decide",
    "decide_through",
    "heartbeat",
    "lost_attempt",
    "oldest_dead_letters",
    "resumed_payload",
    "settle",
    "submit_through",
    "undecide",
    "view",
)

TERMINAL = frozenset({"completed", "failed", "cancelled"})
"""States a task never leaves."""


@dataclass(slots=True)
class TaskRecord:
    """A task's state in a broker (persisted as versioned JSON by brokers that store it whole)."""

    state: str = "pending"
    attempt: int = 0
    """Deliveries started so far; the newest one alone may settle the task."""
    released: int = 0
    """Deliveries that used up no attempt: handed back undone (graceful shutdowns), or paused
    for approval. They do not count against max_deliver."""
    lease_until: float = 0.0
    result: TaskResult | None = None
    error: str | None = None
    paused: TaskPause | None = None
    """The run a paused task waits with; kept after ``decide`` until the next attempt begins."""


def check_options(lease: float, max_deliver: int) -> None:
    """Refuse a lease that is not positive or a max_deliver that is not a positive integer."""
    if not lease > 0:
        raise BuilderError(f"lease must be positive, got {lease!r}")
    check_positive("max_deliver", max_deliver)


def lost_attempt(attempt: int, lease: float) -> str:
    """Why a running attempt whose lease ran out is given up on."""
    return (
        f"attempt {attempt} was lost: no heartbeat within the {lease:g}s lease "
        "(its worker crashed or hung)"
    )


def begin(rec: TaskRecord, now: float, lease: float, max_deliver: int) -> tuple[str, float]:
    """Start an attempt: ``run`` (its number), ``skip`` (ended or paused), ``busy``, ``dead``.

    ``busy`` comes with the seconds of lease left; a paused task's message is skipped, as
    ``decide`` sends one of its own.
    """
    if rec.state in TERMINAL or rec.state == "paused":  # a paused task waits for its decide
        return "skip", 0.0
    if rec.state == "running" and rec.lease_until > now:
        return "busy", rec.lease_until - now
    spent = rec.attempt - rec.released
    if spent >= max_deliver:
        if rec.state == "running":
            why = lost_attempt(rec.attempt, lease)
        else:
            why = f"last error: {rec.error}"
        rec.state, rec.error = "failed", f"dead-lettered after {spent} attempts; {why}"
        return "dead", 0.0
    rec.attempt += 1
    rec.state, rec.lease_until, rec.paused = "running", now + lease, None
    return "run", float(rec.attempt)


def heartbeat(rec: TaskRecord, attempt: int, now: float, lease: float) -> str:
    """Renew the lease: ``ok``, ``cancelled`` or ``lost`` (another attempt owns the task)."""
    if rec.attempt != attempt:
        return "lost"
    if rec.state != "running":
        return "cancelled" if rec.state == "cancelled" else "lost"
    rec.lease_until = now + lease
    return "ok"


def settle(
    rec: TaskRecord,
    attempt: int,
    action: str,
    max_deliver: int,
    *,
    result: TaskResult | None = None,
    error: str = "",
    paused: TaskPause | None = None,
) -> str:
    """End an attempt, and say how it ended.

    ``action`` is ``complete`` (with ``result``), ``pause`` (with ``paused``), ``fail``,
    ``retry`` (with ``error``) or ``release``; the outcome is ``ok``, ``paused``, ``requeued``,
    ``released``, ``dead``, ``stale`` or ``ended``. A pause, like a release, uses up no attempt.
    The same complete or pause again (a retry whose first answer was lost) gets the first's
    outcome: the attempt's own record stands.
    """
    if rec.attempt != attempt:
        return "stale"
    if rec.state != "running":
        if action == "complete" and rec.state == "completed" and rec.result == result:
            return "ok"
        if action == "pause" and rec.state == "paused" and rec.paused == paused:
            return "paused"
        return "ended"
    if action == "complete":
        rec.state, rec.result, rec.error = "completed", result, None
        return "ok"
    if action == "pause":
        rec.state, rec.paused, rec.released = "paused", paused, rec.released + 1
        rec.lease_until = 0.0
        return "paused"
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


def cancel(rec: TaskRecord) -> bool:
    """Cancel a task that has not ended; whether it was cancelled."""
    if rec.state in TERMINAL:
        return False
    rec.state = "cancelled"
    return True


def decide(rec: TaskRecord) -> TaskPause | None:
    """Queue a paused task again (decisions came for it); the pause it waited with, or ``None``."""
    if rec.state != "paused" or rec.paused is None:
        return None
    rec.state = "pending"
    return rec.paused


def undecide(rec: TaskRecord, attempt: int) -> bool:
    """Undo :func:`decide` whose message could not be sent; ``False`` if an attempt began since."""
    if rec.state != "pending" or rec.attempt != attempt or rec.paused is None:
        return False
    rec.state = "paused"
    return True


def view(rec: TaskRecord, now: float) -> TaskStatus:
    """The status a client sees: a running task whose lease ran out reads ``pending``."""
    state = rec.state
    if state == "running" and rec.lease_until <= now:
        state = "pending"  # its worker is gone: the task waits for another one
    approvals = rec.paused.approvals if state == "paused" and rec.paused is not None else ()
    return TaskStatus(
        state=TaskState(state), result=rec.result, error=rec.error, approvals=approvals
    )


def as_decisions(decisions: Mapping[str, ApprovalDecision | bool]) -> dict[str, ApprovalDecision]:
    """Decisions by approval id, ``True`` and ``False`` made into decisions."""
    return {
        key: value if isinstance(value, ApprovalDecision) else ApprovalDecision(approved=value)
        for key, value in decisions.items()
    }


def resumed_payload(pause: TaskPause, decisions: Mapping[str, ApprovalDecision]) -> str:
    """The message that resumes a paused task: its task, carrying the run's state and decisions."""
    resume = TaskResume(state=pause.state, decisions=dict(decisions))
    return dumps(dataclasses.replace(pause.task, attempt=1, resume=resume))


async def decide_through(
    task_id: str,
    decisions: Mapping[str, ApprovalDecision | bool],
    decide: Callable[[str], Awaitable[TaskPause | None]],
    undecide: Callable[[str, int], Awaitable[bool]],
    send: Callable[[str], Awaitable[object]],
) -> bool:
    """Queue a paused task again with ``decisions``; whether it was paused (and now goes on).

    ``decide`` moves the record from paused to pending (a compare-and-set, so of two clients
    deciding at once one wins) and returns the pause; then ``send`` queues the resuming
    message. When ``send`` raises, ``undecide`` puts the task back to paused, so a failed
    decide leaves no task pending without a message, and :class:`BrokerError` says why.
    """
    pause = await decide(task_id)
    if pause is None:
        return False
    payload = resumed_payload(pause, as_decisions(decisions))
    try:
        await send(payload)
    except Exception as exc:
        why = f"the decisions for task {task_id!r} were not sent ({type(exc).__name__}: {exc})"
        try:
            await asyncio.shield(undecide(task_id, pause.task.attempt))
        except Exception as undone:
            raise BrokerError(
                f"{why}, and the task could not be paused again ({type(undone).__name__}: "
                f"{undone}): cancel it, or it stays pending",
                task_id=task_id,
            ) from exc
        raise BrokerError(f"{why}; it is paused still: decide again", task_id=task_id) from exc
    return True


class TaskStore(Protocol):
    """Where a broker without a key-value store keeps task records (e.g. ``RedisTaskStore``)."""

    async def create(self, task_id: str) -> bool:
        """Record a new pending task; ``False`` when the id is already known."""
        ...

    async def withdraw(self, task_id: str) -> bool:
        """Remove a pending record no attempt has begun (its submit failed); whether removed."""
        ...

    async def begin(
        self, task_id: str, *, lease: float, max_deliver: int, payload: str = ""
    ) -> tuple[str, float]:
        """Start an attempt: ``run`` (number), ``skip`` (ended), ``busy`` (lease left), ``dead``."""
        ...

    async def heartbeat(self, task_id: str, attempt: int, *, lease: float) -> str:
        """Renew the lease: ``ok``, ``cancelled`` or ``lost``."""
        ...

    async def settle(
        self,
        task_id: str,
        attempt: int,
        action: str,
        *,
        max_deliver: int,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        lease: float = 30.0,
        paused: TaskPause | None = None,
    ) -> str:
        """End an attempt; its outcome (see :func:`settle`)."""
        ...

    async def decide(self, task_id: str) -> TaskPause | None:
        """Move a paused task to pending; its pause, or ``None`` (see :func:`decide`)."""
        ...

    async def undecide(self, task_id: str, attempt: int) -> bool:
        """Undo a ``decide`` whose message was not sent (see :func:`undecide`)."""
        ...

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; :class:`KeyError` when unknown."""
        ...

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when unknown."""
        ...

    async def aclose(self) -> None:
        """Close the store's connections if it owns them."""
        ...


async def submit_through(
    store: TaskStore, task_id: str, send: Callable[[], Awaitable[object]]
) -> str:
    """Record a new task in ``store``, then ``send`` its message; ``task_id`` once it is queued.

    A started or ended task is not sent again; a pending one is (its first submit may have died
    before sending, and the store lets one delivery run). When ``send`` raises, the record this
    call created is withdrawn, so the failed submit leaves no task pending forever, and
    :class:`BrokerError` says why; submitting again starts afresh. A record an attempt has begun
    stays: the message was sent after all, and the task runs. (Two submits of one id at the same
    moment, of which only the first to record it fails to send, lose the other's record: its
    message is then skipped as unknown.)
    """
    created = await store.create(task_id)
    if not created and (await store.status(task_id)).state is not TaskState.PENDING:
        return task_id
    try:
        await send()
    except Exception as exc:
        why = f"task {task_id!r} was not queued ({type(exc).__name__}: {exc})"
        if not created:
            raise BrokerError(f"{why}; an earlier submit's record stays", task_id=task_id) from exc
        try:
            await asyncio.shield(store.withdraw(task_id))
        except Exception as undone:
            raise BrokerError(
                f"{why}, and its record could not be withdrawn ({type(undone).__name__}: {undone})",
                task_id=task_id,
            ) from exc
        raise BrokerError(f"{why}; no record of it was kept", task_id=task_id) from exc
    return task_id


# --- The broker boundary: where every broker operation meets its caller.

ServiceErrors = tuple[type[BaseException], ...]


class BrokerBoundary:
    """Turns what a client library raises for a failed or unreachable service into BrokerError.

    A subclass names those exceptions in ``_service_errors`` (its library's base error, and
    ``OSError`` for sockets); every method named in ``_operations`` that a class defines is
    wrapped when the class is made, so each operation of each broker, delivery and task store
    raises :class:`~daimon.core.errors.BrokerError` for them, and nothing else of the library.
    daimon's own errors, and ``KeyError`` for an unknown task, pass as they are; the error
    names the task the call was about (``_task_of``).
    """

    __slots__ = ()

    _service_errors: ClassVar[ServiceErrors] = ()
    _operations: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls._operations & vars(cls).keys():
            setattr(cls, name, _guarded(name, vars(cls)[name]))

    def _task_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
        """The task an operation is about: its first argument (a task, or a task id)."""
        first = args[0] if args else kwargs.get("task", kwargs.get("task_id"))
        if isinstance(first, AgentTask):
            return first.task_id
        return first if isinstance(first, str) else None

    def _service_error(self, operation: str, task_id: str | None, exc: BaseException) -> Exception:
        """The daimon error for ``exc``, which the service's library raised in ``operation``."""
        about = f" of task {task_id!r}" if task_id is not None else ""
        return BrokerError(
            f"{type(self).__name__}.{operation}{about} failed: the service failed or cannot be "
            f"reached ({type(exc).__name__}: {exc})",
            task_id=task_id,
        )


def _guarded(operation: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """``method``, raising its service's errors as daimon errors (see :class:`BrokerBoundary`)."""

    @functools.wraps(method)
    async def call(self: BrokerBoundary, *args: Any, **kwargs: Any) -> Any:
        task_id = self._task_of(args, kwargs)
        try:
            return await method(self, *args, **kwargs)
        except (DaimonError, KeyError):
            raise
        except self._service_errors as exc:
            raise self._service_error(operation, task_id, exc) from exc

    return call


class SettlingDelivery(BrokerBoundary):
    """A delivery's public settle methods over one ``_settle`` step that returns its outcome.

    ``heartbeat`` and ``_settle`` are broker operations (see :class:`BrokerBoundary`): a
    subclass sets ``_service_errors`` to its broker's.
    """

    __slots__ = ()

    _operations = frozenset({"heartbeat", "_settle"})

    task: AgentTask

    def _task_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
        return self.task.task_id

    def __repr__(self) -> str:
        return f"<delivery of {self.task.task_id!r}, attempt {self.task.attempt}>"

    async def _settle(
        self,
        action: str,
        *,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        paused: TaskPause | None = None,
    ) -> str:
        raise NotImplementedError

    async def complete(self, result: TaskResult) -> bool:
        """Record the result and acknowledge; ``False`` when refused (stale or already ended)."""
        return await self._settle("complete", result=result) == "ok"

    async def pause(self, paused: TaskPause) -> bool:
        """Record that the run waits for approvals, and acknowledge; ``False`` when refused."""
        return await self._settle("pause", paused=paused) == "paused"

    async def fail(self, error: str, *, retry: bool = False, delay: float = 0.0) -> bool:
        """Record a failure (retried, or dead-lettered); ``False`` when refused."""
        outcome = await self._settle("retry" if retry else "fail", error=error, delay=delay)
        return outcome in ("requeued", "dead")

    async def release(self) -> None:
        """Hand the task back undone; the attempt does not count."""
        await self._settle("release")


class StoreDelivery(SettlingDelivery):
    """A delivery whose record is in a :class:`TaskStore`; subclasses answer the message."""

    __slots__ = ("_lease", "_max_deliver", "_store", "task")

    def __init__(self, store: TaskStore, task: AgentTask, *, lease: float, max_deliver: int):
        self._store = store
        self._lease = lease
        self._max_deliver = max_deliver
        self.task = task

    async def heartbeat(self) -> bool:
        """Renew the lease in the store; ``False`` when this attempt must stop."""
        outcome = await self._store.heartbeat(
            self.task.task_id, self.task.attempt, lease=self._lease
        )
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
        delay = max(delay, 0.0)
        outcome = await self._store.settle(
            self.task.task_id,
            self.task.attempt,
            action,
            max_deliver=self._max_deliver,
            result=result,
            error=error,
            delay=delay,
            lease=self._lease,
            paused=paused,
        )
        if outcome == "dead":  # the dead letter carries the recorded reason, with the count
            error = (await self._store.status(self.task.task_id)).error or error
        await self._answer(outcome, delay=delay, error=error)
        return outcome

    async def _answer(self, outcome: str, *, delay: float, error: str) -> None:
        """Answer the service's message once the store has recorded ``outcome``."""
        raise NotImplementedError


class BrokerHandle(BrokerBoundary):
    """What every broker handle has: ``lease``, ``max_deliver``, ``async with``, a boundary.

    Its operations are behind the :class:`BrokerBoundary`, which also checks the task id each
    is given (:func:`daimon.core.ids.check_id`): a bad one raises
    :class:`~daimon.core.errors.InvalidIdError` the same way on every broker, before anything
    is sent.
    """

    _operations = frozenset({"submit", "status", "cancel", "decide", "claim", "dead_letters"})

    _lease: float
    _max_deliver: int

    def _task_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
        task_id = super()._task_of(args, kwargs)
        return check_id("task", task_id) if task_id is not None else None

    @property
    def lease(self) -> float:
        """Seconds a delivery stays leased without a heartbeat."""
        return self._lease

    @property
    def max_deliver(self) -> int:
        """Attempts a task gets before it is dead-lettered."""
        return self._max_deliver

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the handle's connections; the broker's own method."""
        raise NotImplementedError


class SettleByTaskId(BrokerHandle):
    """A :class:`BrokerHandle` with the seed's by-id loop: ``receive``, ``complete``, ``fail``.

    They work over :meth:`~daimon.core.Broker.claim`, for simple callers that settle by task id
    rather than through a :class:`~daimon.core.Delivery` (no heartbeats: the lease must outlast
    the work); the broker keeps the deliveries it handed out this way in ``self._held``.
    """

    _held: dict[str, Any]

    async def claim(self, wait: float = 1.0) -> Any:
        """The next delivery, waiting up to ``wait`` seconds; the broker's own method."""
        raise NotImplementedError

    async def receive(self) -> AgentTask | None:
        """Claim the next task (waiting up to a second); settle it with ``complete``/``fail``."""
        delivery = await self.claim(wait=1.0)
        if delivery is None:
            return None
        self._held[delivery.task.task_id] = delivery
        task: AgentTask = delivery.task
        return task

    async def complete(self, task_id: str, result: TaskResult) -> None:
        """Record the result of a task this handle received."""
        await self._held.pop(task_id).complete(result)

    async def fail(self, task_id: str, error: str) -> None:
        """Record the failure of a task this handle received (dead-lettering it)."""
        await self._held.pop(task_id).fail(error)


class StoreBackedBroker(SettleByTaskId):
    """A broker whose service only moves messages: task states live in a :class:`TaskStore`.

    ``status`` and ``cancel`` are the store's; ``_close_store`` closes it when the broker owns it.
    """

    _store: TaskStore
    _own_store: bool

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when it is unknown."""
        return await self._store.status(task_id)

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; whether it was cancelled."""
        return await self._store.cancel(task_id)

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        """Send decisions for a paused task: it is queued again to resume; whether it was paused.

        Raises:
            KeyError: The task is unknown.
            BrokerError: The message could not be sent; the task is still paused.
        """
        store = self._store

        async def send(payload: str) -> None:
            await self._send_task(task_id, payload)

        return await decide_through(task_id, decisions, store.decide, store.undecide, send)

    async def _send_task(self, task_id: str, payload: str) -> None:
        """Send one task message to the queue; the broker's own method."""
        raise NotImplementedError

    async def _close_store(self) -> None:
        if self._own_store:
            await self._store.aclose()


# --- Dead letters, as every broker lists them (daimon.core.Broker.dead_letters).

MAX_DEAD_LETTERS = 10_000
"""The most dead letters one :meth:`Broker.dead_letters` call lists."""


def check_dead_letter_limit(limit: int) -> int:
    """``limit`` when it is a whole number from 1 to 10,000; else :class:`BuilderError`."""
    if type(limit) is not int or not 1 <= limit <= MAX_DEAD_LETTERS:
        raise BuilderError(
            f"limit must be a whole number from 1 to {MAX_DEAD_LETTERS:,}, got {limit!r}"
        )
    return limit


def dead_letter_task(payload: str | bytes, task_id: str) -> AgentTask:
    """The task a dead letter carries; an empty task of ``task_id`` when it cannot be read."""
    try:
        return loads(payload, AgentTask)
    except SerializationError:
        return AgentTask(task_id=task_id, input="")


async def dead_letter_from_store(
    store: TaskStore, payload: str | bytes, task_id: str, reason: str, dead_at: float
) -> DeadLetter:
    """A dead letter whose body is a message's and whose reason is the store's record, if kept."""
    task = dead_letter_task(payload, task_id)
    try:
        status = await store.status(task.task_id)
    except KeyError:  # the record expired: the message's own reason is all there is
        status = None
    if status is not None and status.state is TaskState.FAILED and status.error:
        reason = status.error
    return DeadLetter(
        task=task, reason=reason, attempts=dead_letter_attempts(reason), dead_at=dead_at
    )


def oldest_dead_letters(letters: list[DeadLetter], limit: int) -> list[DeadLetter]:
    """``letters`` oldest first, one per task (the first), at most ``limit`` of them."""
    seen: set[str] = set()
    out = []
    for letter in sorted(letters, key=lambda d: d.dead_at):
        if letter.task.task_id not in seen:
            seen.add(letter.task.task_id)
            out.append(letter)
    return out[:limit]


_SPENT = re.compile(r"^dead-lettered after (\d+) attempts;")


def dead_letter_attempts(reason: str) -> int:
    """The attempt count a ``dead-lettered after N attempts; ...`` reason names; else ``0``."""
    found = _SPENT.match(reason)
    return int(found.group(1)) if found else 0
