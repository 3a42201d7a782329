"""A task broker on RabbitMQ (aio-pika), with task states in a separate task store.

Queues, named after ``queue``: ``<queue>``, a durable quorum queue of persistent task messages
(``submit`` returns after the publisher confirm); ``<queue>.dead``, bound to the dead-letter
exchange ``<queue>.dlx`` that ``<queue>`` names; and ``<queue>.delay``, where a task waits out a
retry delay (per-message TTL) before it dead-letters back into ``<queue>``. Consumers ack
manually, after the task's outcome is recorded; a worker whose connection closes (it crashed)
gets its unacked tasks requeued by RabbitMQ at once.

A task is dead-lettered by the broker itself: it publishes a copy to ``<queue>.dead`` and
waits for the publisher confirm before it acks the task message, so once ``fail`` (or the
``claim`` that finds a task's attempts spent) returns, ``dead_letters`` lists it. (Rejecting
into the dead-letter exchange would not promise that: RabbitMQ moves a rejected message
asynchronously, after ``basic.reject`` has been sent.) If the worker dies between the confirm
and the ack, the message comes back, finds its task ended and is acked. If the copy cannot be
published, the message is rejected into the dead-letter exchange instead, which also stays as
the backstop for what RabbitMQ dead-letters on its own.

RabbitMQ is not a key-value store, and a task's state must be readable by any client and
changed with compare-and-set (attempt fencing), so states live in a ``store``: a
:class:`~daimon.distributed.brokers.redis.RedisTaskStore`, or anything with its methods. The
store counts attempts (not the quorum queue's ``delivery-limit``: a graceful hand-back must not
use one up), and after the last allowed attempt the task is rejected into the dead-letter queue.

RabbitMQ answers a declare of a quorum queue that another client is creating at that moment
before the queue has started. A consume sent then fails and RabbitMQ closes the connection; the
handle consumes again at its next ``claim``, once aio-pika has reconnected (after its
``reconnect_interval``: 5 s, or what the URL's ``?reconnect_interval=`` says). A publish sent
then is nacked, and ``submit`` raises :class:`~daimon.core.errors.BrokerError`. Calling
:meth:`RabbitMQBroker.setup` once, before clients and workers start on a new queue, avoids both.

A worker that hangs with its connection open keeps its tasks until RabbitMQ's
``consumer_timeout`` (30 minutes by default) closes its channel; meanwhile ``status`` reports
such a task ``pending`` once its lease has run out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from typing import Any

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError, DaimonError, SerializationError
from daimon.core.optional import require
from daimon.core.tasks import AgentTask, DeadLetter
from daimon.kit.checks import check_positive
from daimon.kit.task_records import (
    StoreBackedBroker,
    StoreDelivery,
    TaskStore,
    check_dead_letter_limit,
    check_options,
    dead_letter_from_store,
    oldest_dead_letters,
    submit_through,
)

aio_pika = require("aio_pika", extra="rabbitmq")
aio_pika_exceptions = require("aio_pika.exceptions", extra="rabbitmq")
amqp_commands = require("pamqp.commands", extra="rabbitmq")  # aio-pika's frames

__all__ = ("RabbitMQBroker", "TaskStore")

_log = logging.getLogger("daimon.distributed")
_SERVICE_ERRORS = (aio_pika_exceptions.AMQPError, OSError)
"""What aio-pika raises when RabbitMQ fails or cannot be reached: raised as BrokerError."""
_DEAD_AT = "x-daimon-dead-at"
"""The header with the time (epoch seconds) the broker dead-lettered a task."""
_REASON = "x-daimon-reason"
"""The header with why, for when the task store no longer has the task's record."""


class RabbitMQBroker(StoreBackedBroker):
    """Queues tasks in RabbitMQ; see the module docstring.

    Args:
        connection: A URL such as ``"amqp://guest:guest@localhost/"`` (a robust connection that
            reconnects, closed by :meth:`aclose`), or an open ``aio_pika`` connection (left open).
        store: Where task states live (a ``RedisTaskStore``); closed by :meth:`aclose` when
            ``own_store``.
        queue: The task queue's name; the others are named after it.
        lease: Seconds a task's state stays ``running`` without a heartbeat.
        max_deliver: Attempts a task gets before it is dead-lettered.
        prefetch: Unacknowledged tasks this handle may hold: set it to the worker's concurrency.
        own_store: Close ``store`` with this broker.
    """

    _service_errors = _SERVICE_ERRORS

    def __init__(
        self,
        connection: Any,
        *,
        store: TaskStore,
        queue: str = "daimon.tasks",
        lease: float = 30.0,
        max_deliver: int = 5,
        prefetch: int = 8,
        own_store: bool = False,
    ) -> None:
        check_options(lease, max_deliver)
        check_positive("prefetch", prefetch)
        if not queue:
            raise BuilderError("queue must not be empty")
        self._url = connection if isinstance(connection, str) else None
        self._connection: Any = None if self._url is not None else connection
        self._store = store
        self._own_store = own_store
        self._queue_name = queue
        self._lease = float(lease)
        self._max_deliver = max_deliver
        self._prefetch = prefetch
        self._channel: Any = None
        self._queue: Any = None
        self._consuming = False
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._closed = False
        self._held: dict[str, _RabbitDelivery] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RabbitMQBroker:
        """A broker on its own connection to ``url``; ``store`` is a required option."""
        if "store" not in options:
            raise BuilderError("RabbitMQBroker needs a store= for task states (a RedisTaskStore)")
        return cls(url, **options)

    @property
    def store(self) -> TaskStore:
        """Where task states live."""
        return self._store

    async def setup(self) -> None:
        """Declare the exchanges and queues if they are missing."""
        await self._ready()

    async def aclose(self) -> None:
        """Close the connection (and the store) if this broker opened them; safe to call again.

        Tasks this handle holds unacknowledged go back to the queue.
        """
        if self._closed:
            return
        self._closed = True
        if self._url is not None and self._connection is not None:
            await self._connection.close()
        elif self._channel is not None:
            await self._channel.close()
        await self._close_store()

    async def _ready(self) -> Any:
        if self._queue is None:
            async with self._lock:
                if self._queue is None:
                    await self._open()
        return self._queue

    async def _open(self) -> None:
        if self._closed:
            raise DaimonError("the broker is closed")
        if self._connection is None:
            self._connection = await aio_pika.connect_robust(self._url)
        channel = await self._connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=self._prefetch)
        name = self._queue_name
        dlx = await channel.declare_exchange(
            f"{name}.dlx", aio_pika.ExchangeType.FANOUT, durable=True
        )
        dead = await channel.declare_queue(f"{name}.dead", durable=True)
        await dead.bind(dlx)
        await channel.declare_queue(
            f"{name}.delay",
            durable=True,
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": name},
        )
        queue = await channel.declare_queue(
            name,
            durable=True,
            arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": f"{name}.dlx"},
        )
        self._channel, self._queue = channel, queue

    async def _publish(self, routing_key: str, body: bytes, task_id: str, **props: Any) -> Any:
        """Publish to the default exchange; the publisher confirm (or a returned message)."""
        await self._ready()
        message = aio_pika.Message(
            body,
            message_id=task_id,
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            **props,
        )
        return await self._channel.default_exchange.publish(message, routing_key=routing_key)

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task`` (after RabbitMQ confirms it); a started or ended task is not requeued.

        Raises:
            BrokerError: The message could not be sent; no record of the task was kept.
        """
        payload = dumps(task)

        async def send() -> None:
            await self._send_task(task.task_id, payload)

        # A duplicate message is harmless: the store lets one delivery run, and acks the other
        # once the task has ended.
        return await submit_through(self._store, task.task_id, send)

    async def _send_task(self, task_id: str, payload: str) -> None:
        await self._publish(self._queue_name, payload.encode("utf-8"), task_id)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks, from ``<queue>.dead``; none is removed.

        AMQP cannot peek, so this takes up to ``limit`` messages with ``basic.get`` on a channel
        of its own, unacknowledged, and hands them all back with one ``nack(requeue=True)``
        (multiple): RabbitMQ puts requeued messages back in their places, so the queue keeps
        its order, and if this reader dies first the channel's close requeues them the same way.
        Nothing is ever acknowledged, so no dead letter can be lost. Messages are marked
        redelivered, and a second reader at the same moment sees only what this one left.
        The reason and attempt count come from the task store.
        """
        check_dead_letter_limit(limit)
        await self._ready()
        channel = await self._connection.channel(publisher_confirms=False)
        taken: list[Any] = []
        try:
            dead = await channel.declare_queue(f"{self._queue_name}.dead", passive=True)
            while len(taken) < limit:
                message = await dead.get(no_ack=False, fail=False)
                if message is None:
                    break
                taken.append(message)
            if taken:
                await taken[-1].nack(multiple=True, requeue=True)
        finally:
            await channel.close()
        letters = []
        for message in taken:
            reason, at = _death(message.headers or {})
            letters.append(
                await dead_letter_from_store(
                    self._store, message.body, message.message_id or "", reason, at
                )
            )
        # A stable sort: within one second (x-death's resolution) the queue's order stays.
        return oldest_dead_letters(letters, limit)

    async def claim(self, wait: float = 1.0) -> _RabbitDelivery | None:
        """The next task, waiting up to ``wait`` seconds for one."""
        await self._consume(await self._ready())
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            try:
                message = await asyncio.wait_for(
                    self._inbox.get(), max(deadline - time.monotonic(), 0.0)
                )
            except TimeoutError:
                return None
            delivery = await self._begin(message)
            if delivery is not None:
                return delivery

    async def _consume(self, queue: Any) -> None:
        """Start this handle's consumer, once it has none; a refused start is tried again.

        The flag is set only once RabbitMQ has confirmed the consumer: a consume that fails
        (the server closed the connection, as RabbitMQ does when the quorum queue another
        client is declaring at that moment has not started yet) leaves no consumer, and the
        next claim starts one on the reconnected channel.
        """
        if self._consuming:
            return
        async with self._lock:
            if not self._consuming:
                await queue.consume(self._inbox.put, no_ack=False)
                self._consuming = True

    async def _begin(self, message: Any) -> _RabbitDelivery | None:
        payload = message.body.decode("utf-8", errors="replace")
        try:
            task: AgentTask | None = loads(message.body, AgentTask)
            error = ""
        except SerializationError as exc:
            task, error = None, f"SerializationError: {exc}"
        task_id = task.task_id if task is not None else (message.message_id or "")
        try:
            outcome, value = await self._store.begin(
                task_id, lease=self._lease, max_deliver=self._max_deliver, payload=payload
            )
        except BuilderError:  # no task id at all
            await self._dead_letter(message, "the message names no task")
            return None
        if outcome == "skip":
            await message.ack()
            return None
        if outcome == "busy":  # a duplicate, or a retry before its delay: back after that
            await self._delay(message, value)
            return None
        if outcome == "dead":
            await self._dead_letter(message, "its attempts are spent")
            return None
        attempt = int(value)
        if task is None:  # undecodable: dead-letter it rather than fail on it forever
            _log.error("task %s cannot be read, dead-lettering it: %s", task_id, error)
            placeholder = AgentTask(task_id=task_id, input="", attempt=attempt)
            await _RabbitDelivery(self, message, placeholder).fail(error)
            return None
        return _RabbitDelivery(self, message, dataclasses.replace(task, attempt=attempt))

    async def _dead_letter(self, message: Any, reason: str) -> None:
        """Put a copy in ``<queue>.dead`` (confirmed, so it is listed from now on), then ack."""
        try:
            confirm = await self._publish(
                f"{self._queue_name}.dead",
                message.body,
                message.message_id or "",
                headers={_DEAD_AT: time.time(), _REASON: reason},
            )
        except _SERVICE_ERRORS:
            confirm = None
        if not isinstance(confirm, amqp_commands.Basic.Ack):  # nacked, or returned unroutable
            _log.warning("could not publish a dead letter; rejecting it into the DLX instead")
            await message.reject(requeue=False)
            return
        await message.ack()

    async def _delay(self, message: Any, seconds: float) -> None:
        """Send a copy through the delay queue (back in ``seconds``), then ack this one."""
        await self._publish(
            f"{self._queue_name}.delay",
            message.body,
            message.message_id or "",
            expiration=max(seconds, 0.001),
        )
        await message.ack()


def _death(headers: dict[str, Any]) -> tuple[str, float]:
    """Why and when (epoch seconds, 0 if unknown) a dead letter died, from its headers.

    The broker's own dead letters carry ``x-daimon-*`` headers; what RabbitMQ dead-lettered
    itself carries ``x-death``.
    """
    at = headers.get(_DEAD_AT)
    if isinstance(at, (int, float)):
        return str(headers.get(_REASON, "")), float(at)
    death = (headers.get("x-death") or [{}])[0]
    death = death if isinstance(death, dict) else {}
    when = death.get("time")
    return str(death.get("reason", "")), (
        when.timestamp() if isinstance(when, datetime.datetime) else 0.0
    )


class _RabbitDelivery(StoreDelivery):
    __slots__ = ("_broker", "_message")

    _service_errors = _SERVICE_ERRORS

    def __init__(self, broker: RabbitMQBroker, message: Any, task: AgentTask) -> None:
        super().__init__(broker._store, task, lease=broker._lease, max_deliver=broker._max_deliver)
        self._broker = broker
        self._message = message

    async def _answer(self, outcome: str, *, delay: float, error: str) -> None:
        message = self._message
        if message.processed:
            return
        try:
            if outcome == "dead":
                await self._broker._dead_letter(message, error)
            elif outcome == "released" or (outcome == "requeued" and delay <= 0):
                await message.nack(requeue=True)
            elif outcome == "requeued":
                await self._broker._delay(message, delay)
            else:  # ok, ended, or stale (a newer attempt holds another copy): this one is done
                await message.ack()
        except Exception:
            _log.warning(
                "could not answer the message of task %s", self.task.task_id, exc_info=True
            )
