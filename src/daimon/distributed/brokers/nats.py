"""A task broker on NATS JetStream: a work-queue stream for tasks, a key-value bucket for states.

Tasks are published to ``<stream>.<queue>`` (``submit`` returns after the server's PubAck; the
task id is the ``Nats-Msg-Id``, so a retried submit inside the stream's duplicate window stores
nothing twice) and leased through one durable pull consumer per queue with explicit acks and
``AckWait`` = the lease. A heartbeat is an in-progress ack plus a lease renewal in the task's
key-value record. Every change to a record is a compare-and-set on its revision, so only the
newest attempt can settle a task, and only once.

Attempts are counted in the record, not with the consumer's ``MaxDeliver``: a graceful hand-back
must not use up an attempt, and a message that reaches ``MaxDeliver`` stays in a work-queue
stream with no terminal status unless someone hears the advisory at that moment. So the consumer
redelivers without limit, and the delivery after the last allowed attempt dead-letters the task:
its record becomes ``failed`` (with why), a copy goes to the ``<stream>_DEAD`` stream, and the
message is terminated (``term``).

Leases are compared with the workers' wall clocks: keep them in sync (NTP), well within a lease.
Durability is the server's: JetStream syncs to disk every two minutes by default; set
``sync_interval: always`` (server 2.10+) to make a PubAck mean "on disk".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from daimon.core.codec import dumps, loads
from daimon.core.errors import BrokerError, BuilderError, DaimonError, SerializationError
from daimon.core.optional import require
from daimon.core.results import ApprovalDecision
from daimon.core.tasks import AgentTask, DeadLetter, TaskPause, TaskResult, TaskStatus
from daimon.kit.task_records import (
    SettleByTaskId,
    SettlingDelivery,
    TaskRecord,
    begin,
    cancel,
    check_dead_letter_limit,
    check_options,
    dead_letter_attempts,
    dead_letter_task,
    decide,
    decide_through,
    heartbeat,
    settle,
    undecide,
    view,
)

nats = require("nats", extra="nats")
nats_errors = require("nats.errors", extra="nats")
js_api = require("nats.js.api", extra="nats")
js_errors = require("nats.js.errors", extra="nats")

__all__ = ("NatsBroker",)

_log = logging.getLogger("daimon.distributed")
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_SERVICE_ERRORS = (nats_errors.Error, OSError)
"""What nats-py raises when the server fails or cannot be reached: raised as BrokerError."""

# --- The broker.


def _encode(rec: TaskRecord) -> bytes:
    return dumps(rec).encode("utf-8")


def _decode(data: bytes) -> TaskRecord:
    return loads(data, TaskRecord)


def _key(queue: str, task_id: str) -> str:
    """``<queue>.<task id>``, every byte outside ``[A-Za-z0-9_-]`` written as ``=XX``."""
    if not task_id:
        raise BuilderError("a task id must not be empty")
    quoted = quote(task_id, safe="").replace(".", "%2E").replace("~", "%7E")
    return f"{queue}.{quoted.replace('%', '=')}"


class NatsBroker(SettleByTaskId):
    """Queues tasks in a JetStream work-queue stream; see the module docstring.

    Args:
        client: A connected ``nats.aio.client.Client`` (left open by :meth:`aclose`), or a URL
            such as ``"nats://localhost:4222"`` (connected on first use, reconnecting without
            limit, and closed by :meth:`aclose`).
        queue: The queue's name (letters, digits, ``-`` and ``_``).
        stream: The tasks' stream; dead letters go to ``<stream>_DEAD``.
        bucket: The key-value bucket of task states.
        lease: Seconds a delivery stays leased without a heartbeat (the consumer's ``AckWait``).
        max_deliver: Attempts a task gets before it is dead-lettered.
        timeout: Seconds a connect or a request (a publish's PubAck, a key-value read or write)
            may take before it raises :class:`~daimon.core.errors.BrokerError`; while the server
            restarts, requests wait for it up to this long.
    """

    _service_errors = _SERVICE_ERRORS

    def __init__(
        self,
        client: Any,
        *,
        queue: str = "tasks",
        stream: str = "DAIMON_TASKS",
        bucket: str = "daimon_tasks",
        lease: float = 30.0,
        max_deliver: int = 5,
        timeout: float = 5.0,
    ) -> None:
        check_options(lease, max_deliver)
        if not timeout > 0:
            raise BuilderError(f"timeout must be positive, got {timeout!r}")
        self._timeout = float(timeout)
        for what, name in (("queue", queue), ("stream", stream), ("bucket", bucket)):
            if not _NAME.match(name):
                raise BuilderError(f"{what} must be letters, digits, - and _, got {name!r}")
        self._url = client if isinstance(client, str) else None
        self._nc: Any = None if self._url is not None else client
        self._queue = queue
        self._stream = stream
        self._subject = f"{stream}.{queue}"
        self._dead_stream = f"{stream}_DEAD"
        self._dead_subject = f"{stream}_DEAD.{queue}"
        self._bucket = bucket
        self._durable = f"{queue}_workers"
        self._lease = float(lease)
        self._max_deliver = max_deliver
        self._js: Any = None
        self._kv: Any = None
        self._sub: Any = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._held: dict[str, _NatsDelivery] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> NatsBroker:
        """A broker on its own connection to ``url``."""
        return cls(url, **options)

    async def setup(self) -> None:
        """Create the streams, the consumer and the bucket if they are missing."""
        await self._ready()

    async def aclose(self) -> None:
        """Close the connection if this broker opened it; safe to call again.

        Deliveries this handle still holds come back after their lease.
        """
        if self._closed:
            return
        self._closed = True
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                _log.debug("unsubscribing failed", exc_info=True)
        if self._url is not None and self._nc is not None:
            try:
                await self._nc.close()
            except _SERVICE_ERRORS:  # the server went away first: nothing is left to close
                _log.debug("closing the NATS connection failed", exc_info=True)

    async def _ready(self) -> Any:
        if self._kv is None:
            async with self._lock:
                if self._kv is None:
                    await self._open()
        return self._kv

    async def _open(self) -> None:
        if self._closed:
            raise DaimonError("the broker is closed")
        if self._nc is None:
            assert self._url is not None  # a broker given no URL was given a client
            self._nc = await _connect(self._url, self._timeout)
        js = self._nc.jetstream(timeout=self._timeout)
        for name, subject, retention in (
            (self._stream, f"{self._stream}.*", js_api.RetentionPolicy.WORK_QUEUE),
            (self._dead_stream, f"{self._dead_stream}.*", js_api.RetentionPolicy.LIMITS),
        ):
            try:
                await js.stream_info(name)
            except js_errors.NotFoundError:
                await js.add_stream(
                    name=name,
                    subjects=[subject],
                    retention=retention,
                    storage=js_api.StorageType.FILE,
                )
        config = js_api.ConsumerConfig(
            durable_name=self._durable,
            ack_policy=js_api.AckPolicy.EXPLICIT,
            ack_wait=self._lease,
            max_deliver=-1,
            max_ack_pending=-1,
            filter_subject=self._subject,
        )
        self._sub = await js.pull_subscribe(
            self._subject, durable=self._durable, stream=self._stream, config=config
        )
        try:
            kv = await js.key_value(self._bucket)
        except js_errors.BucketNotFoundError:
            kv = await js.create_key_value(
                bucket=self._bucket, history=1, description="daimon task states"
            )
        self._js, self._kv = js, kv

    async def _get(self, task_id: str) -> tuple[TaskRecord, int]:
        kv = await self._ready()
        try:
            entry = await kv.get(_key(self._queue, task_id))
        except js_errors.KeyNotFoundError:
            raise KeyError(task_id) from None
        return _decode(entry.value), int(entry.revision)

    async def _put(self, task_id: str, rec: TaskRecord, revision: int) -> bool:
        """Write ``rec`` if the record is still at ``revision``; whether it was."""
        try:
            await self._kv.update(_key(self._queue, task_id), _encode(rec), last=revision)
        except js_errors.KeyWrongLastSequenceError:
            return False
        return True

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task`` (once JetStream has stored it); a known task id is not queued again.

        Raises:
            BrokerError: The message could not be published (over the server's max_payload,
                the server down); the record this call wrote is deleted again.
        """
        payload = dumps(task).encode("utf-8")
        kv = await self._ready()
        key = _key(self._queue, task.task_id)
        created = 0
        try:
            created = await kv.create(key, _encode(TaskRecord()))
        except js_errors.KeyWrongLastSequenceError:
            rec, _ = await self._get(task.task_id)
            if rec.state != "pending" or rec.attempt:
                return task.task_id  # running or ended: queued before
            # Pending and never started: maybe a submit died before publishing. Publish again;
            # the message id makes it a no-op if it had been.
        try:
            await self._js.publish(self._subject, payload, headers={"Nats-Msg-Id": task.task_id})
        except Exception as exc:
            why = f"task {task.task_id!r} was not queued ({type(exc).__name__}: {exc})"
            if not created:
                raise BrokerError(
                    f"{why}; an earlier submit's record stays", task_id=task.task_id
                ) from exc
            try:  # only the record as this call wrote it: a begun one was published after all
                await asyncio.shield(kv.delete(key, last=created))
            except js_errors.KeyWrongLastSequenceError:
                pass
            except Exception as undone:
                raise BrokerError(
                    f"{why}, and its record could not be deleted ({type(undone).__name__}: "
                    f"{undone})",
                    task_id=task.task_id,
                ) from exc
            raise BrokerError(f"{why}; no record of it was kept", task_id=task.task_id) from exc
        return task.task_id

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when it is unknown."""
        rec, _ = await self._get(task_id)
        return view(rec, time.time())

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; whether it was cancelled."""
        while True:
            rec, revision = await self._get(task_id)
            if not cancel(rec):
                return False
            if await self._put(task_id, rec, revision):
                return True

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        """Send decisions for a paused task: it is queued again to resume; whether it was paused.

        Raises:
            KeyError: The task is unknown.
            BrokerError: The decisions could not be published; the task is still paused.
        """

        async def decided(task_id: str) -> TaskPause | None:
            pause: TaskPause | None = await self._change(task_id, decide)
            return pause

        async def undecided(task_id: str, attempt: int) -> bool:
            return bool(await self._change(task_id, lambda rec: undecide(rec, attempt)))

        async def send(payload: str) -> None:
            # Its own message id: the submit's (the task id) may be inside the duplicate window.
            attempt = (await self._get(task_id))[0].attempt
            msg_id = f"{task_id}:resume:{attempt}"
            await self._js.publish(
                self._subject, payload.encode("utf-8"), headers={"Nats-Msg-Id": msg_id}
            )

        return await decide_through(task_id, decisions, decided, undecided, send)

    async def _change(self, task_id: str, step: Callable[[TaskRecord], Any]) -> Any:
        """Apply ``step`` to the record (compare-and-set, again on a race); what it returned.

        A falsy answer writes nothing.
        """
        while True:
            rec, revision = await self._get(task_id)
            outcome = step(rec)
            if not outcome or await self._put(task_id, rec, revision):
                return outcome

    async def claim(self, wait: float = 1.0) -> _NatsDelivery | None:
        """The next task, waiting up to ``wait`` seconds for one."""
        await self._ready()
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            try:
                msgs = await self._sub.fetch(1, timeout=max(deadline - time.monotonic(), 0.05))
            except nats_errors.TimeoutError:
                if not self._nc.is_connected:  # no task came because no server answers
                    raise
                return None
            delivery = await self._begin(msgs[0])
            if delivery is not None:
                return delivery
            if time.monotonic() >= deadline:
                return None

    async def _begin(self, msg: Any) -> _NatsDelivery | None:
        try:
            task: AgentTask | None = loads(msg.data, AgentTask)
            error = ""
        except SerializationError as exc:
            task, error = None, f"SerializationError: {exc}"
        task_id = task.task_id if task is not None else (msg.headers or {}).get("Nats-Msg-Id", "")
        while True:
            try:
                rec, revision = await self._get(task_id)
            except (KeyError, BuilderError):
                _log.error("task %r has no state record; dropping its message", task_id)
                await msg.term()
                return None
            outcome, value = begin(rec, time.time(), self._lease, self._max_deliver)
            if outcome == "skip":
                await msg.ack()
                return None
            if outcome == "busy":
                await msg.nak(delay=value)
                return None
            if outcome == "dead":
                await self._dead_letter(task_id, msg.data, rec)
            if await self._put(task_id, rec, revision):
                break
        if outcome == "dead":
            await msg.term()
            return None
        attempt = int(value)
        if task is None:  # undecodable: dead-letter it rather than fail on it forever
            _log.error("task %s cannot be read, dead-lettering it: %s", task_id, error)
            placeholder = AgentTask(task_id=task_id, input="", attempt=attempt)
            await _NatsDelivery(self, msg, placeholder).fail(error)
            return None
        return _NatsDelivery(self, msg, dataclasses.replace(task, attempt=attempt))

    async def _dead_letter(self, task_id: str, payload: bytes, rec: TaskRecord) -> None:
        await self._js.publish(
            self._dead_subject,
            payload,
            headers={
                "Nats-Msg-Id": f"dead:{task_id}",
                "Daimon-Error": (rec.error or "")[:1000],
                "Daimon-Attempts": str(rec.attempt - rec.released),
            },
        )

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks of this queue, from ``<stream>_DEAD``.

        Read message by message with ``get_msg`` (no consumer, so nothing is acknowledged or
        removed); the stream keeps dead letters until its limits drop them.
        """
        check_dead_letter_limit(limit)
        await self._ready()
        out: list[DeadLetter] = []
        seq = 1
        while len(out) < limit:
            try:
                msg = await self._js.get_msg(
                    self._dead_stream, seq=seq, subject=self._dead_subject, next=True
                )
            except js_errors.NotFoundError:
                break
            headers = msg.headers or {}
            reason = str(headers.get("Daimon-Error", ""))
            attempts = str(headers.get("Daimon-Attempts", ""))
            task_id = str(headers.get("Nats-Msg-Id", "")).removeprefix("dead:")
            out.append(
                DeadLetter(
                    task=dead_letter_task(msg.data or b"", task_id),
                    reason=reason,
                    attempts=int(attempts) if attempts.isdigit() else dead_letter_attempts(reason),
                    dead_at=msg.time.timestamp() if msg.time is not None else 0.0,
                )
            )
            seq = int(msg.seq or seq) + 1
        return out


class _NatsDelivery(SettlingDelivery):
    __slots__ = ("_broker", "_msg", "task")

    _service_errors = _SERVICE_ERRORS

    def __init__(self, broker: NatsBroker, msg: Any, task: AgentTask) -> None:
        self._broker = broker
        self._msg = msg
        self.task = task

    async def heartbeat(self) -> bool:
        broker = self._broker
        while True:
            rec, revision = await broker._get(self.task.task_id)
            outcome = heartbeat(rec, self.task.attempt, time.time(), broker._lease)
            if outcome != "ok":
                return False
            if await broker._put(self.task.task_id, rec, revision):
                break
        await _answer(self._msg.in_progress)
        return True

    async def _settle(
        self,
        action: str,
        *,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        paused: TaskPause | None = None,
    ) -> str:
        if result is not None:
            dumps(result)
        broker = self._broker
        task_id = self.task.task_id
        while True:
            rec, revision = await broker._get(task_id)
            outcome = settle(
                rec,
                self.task.attempt,
                action,
                broker._max_deliver,
                result=result,
                error=error,
                paused=paused,
            )
            if outcome == "stale":
                return outcome  # the message is another attempt's now: leave it alone
            if outcome == "ended":
                await _answer(self._msg.ack_sync)
                return outcome
            if outcome == "dead":
                await broker._dead_letter(task_id, self._msg.data, rec)
            if await broker._put(task_id, rec, revision):
                break
        if outcome in ("requeued", "released"):
            await _answer(
                self._msg.nak, delay=delay if outcome == "requeued" and delay > 0 else None
            )
        elif outcome == "dead":
            await _answer(self._msg.term)
        else:
            await _answer(self._msg.ack_sync)
        return outcome


async def _connect(url: str, seconds: float) -> Any:
    """A client connected to ``url``, reconnecting without limit once it is connected.

    The first connect is bounded by ``seconds``: told to reconnect without limit, nats-py would
    retry it forever while no server listens.
    """
    client = nats.NATS()
    try:
        async with asyncio.timeout(seconds):
            await client.connect(
                url,
                connect_timeout=seconds,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,
                error_cb=_connection_error,
            )
    except TimeoutError:
        with contextlib.suppress(Exception):
            await client.close()
        raise TimeoutError(f"no NATS server answered at {url} within {seconds:g}s") from None
    return client


async def _connection_error(error: Exception) -> None:
    """Log what the client met (nats-py's default logs a traceback at every reconnect try)."""
    _log.warning("NATS connection: %s: %s", type(error).__name__, error)


async def _answer(method: Any, **kwargs: Any) -> None:
    """Ack, nak or term a message, unless this handle has answered it already."""
    with contextlib.suppress(nats_errors.MsgAlreadyAckdError):
        await method(**kwargs)
