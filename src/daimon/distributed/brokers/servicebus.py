"""A task broker on Azure Service Bus (``azure-servicebus``), with task states in a task store.

One queue, ``queue``, read in peek-lock mode: a delivery locks its message for the queue's
``LockDuration``, a heartbeat renews the lock (``renew_message_lock``) together with the task's
lease in the store, and a message whose worker died is delivered again when its lock expires,
as a new attempt. ``submit`` returns once Service Bus has accepted the message. Outcomes:
complete (``complete_message``), dead-letter (``dead_letter_message`` into
``<queue>/$DeadLetterQueue``, with ``DeadLetterReason`` and the error as its description),
and back to the queue (a retry, a hand-back, or a duplicate whose task is leased elsewhere):
a copy is sent, scheduled for after the delay, and the message completed, so Service Bus's
delivery count grows only when a lock is lost.

Service Bus is not a key-value store, so task states live in a ``store`` (a
:class:`~daimon.distributed.brokers.redis.RedisTaskStore`) that counts attempts: after
``max_deliver`` of them daimon dead-letters the task itself, with its status saying why. The
queue's own ``MaxDeliveryCount`` must be larger (give it as ``max_delivery_count``): were Service
Bus to dead-letter a message first, its task would be left without a terminal status.
Set ``lease`` to the queue's ``LockDuration``: a lock lasts that long from each renewal.

The SDK's senders and receivers are not coroutine-safe, so a handle sends one message at a time
and does one receiver operation at a time (claims wait in short slices). A connection that
Service Bus closes is reopened; held lock tokens still renew and settle over the new one.

Tested only against a local fake of Service Bus's AMQP interface (see ``docs/architecture.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import time
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError, DaimonError, SerializationError
from daimon.core.optional import require
from daimon.core.tasks import AgentTask, DeadLetter
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

servicebus = require("azure.servicebus", extra="servicebus")
servicebus_aio = require("azure.servicebus.aio", extra="servicebus")
servicebus_exceptions = require("azure.servicebus.exceptions", extra="servicebus")
azure_exceptions = require("azure.core.exceptions", extra="servicebus")

__all__ = ("ServiceBusBroker",)

_log = logging.getLogger("daimon.distributed")
_SERVICE_ERRORS = (azure_exceptions.AzureError, OSError)
"""What azure-servicebus raises when Service Bus fails or cannot be reached (its
``ServiceBusError`` is an ``AzureError``): raised as BrokerError."""
_MAX_LOCK = 300.0  # Service Bus's longest LockDuration
_MAX_TEXT = 1024  # dead-letter reason and description are kept this short
_SLICE = 0.25  # seconds a claim waits on the receiver before letting others use it


class ServiceBusBroker(StoreBackedBroker):
    """Queues tasks in Azure Service Bus; see the module docstring.

    Give either ``connection_string`` or ``namespace`` with ``credential``.

    Args:
        queue: The queue's name (it must exist: Service Bus queues are provisioned, not
            declared).
        store: Where task states live (a ``RedisTaskStore``); closed by :meth:`aclose` when
            ``own_store``.
        connection_string: A namespace's connection string (``Endpoint=sb://...;...``).
        namespace: The namespace's host, ``<name>.servicebus.windows.net``.
        credential: An ``azure.identity`` async credential, or an ``AzureNamedKeyCredential``
            or ``AzureSasCredential``, for ``namespace``.
        lease: Seconds a lock and a task's lease last without a heartbeat: the queue's
            ``LockDuration`` (at most 5 minutes).
        max_deliver: Attempts a task gets before daimon dead-letters it.
        max_delivery_count: The queue's ``MaxDeliveryCount``; must exceed ``max_deliver``.
        own_store: Close ``store`` with this broker.
        client_options: More keyword arguments for ``ServiceBusClient`` (``retry_total``,
            ``transport_type``, ...).
    """

    _service_errors = _SERVICE_ERRORS

    def __init__(
        self,
        queue: str,
        *,
        store: TaskStore,
        connection_string: str | None = None,
        namespace: str | None = None,
        credential: Any = None,
        lease: float = 30.0,
        max_deliver: int = 5,
        max_delivery_count: int = 10,
        own_store: bool = False,
        **client_options: Any,
    ) -> None:
        check_options(lease, max_deliver)
        if lease > _MAX_LOCK:
            raise BuilderError(
                f"lease must be at most {_MAX_LOCK:g}s on Service Bus, got {lease!r}"
            )
        if not max_deliver < max_delivery_count:
            raise BuilderError(
                f"max_deliver ({max_deliver}) must be below the queue's MaxDeliveryCount "
                f"({max_delivery_count}), or Service Bus dead-letters tasks before daimon can"
            )
        if not queue:
            raise BuilderError("queue must not be empty")
        if (connection_string is None) == (namespace is None or credential is None):
            raise BuilderError(
                "ServiceBusBroker needs a connection_string, or a namespace and a credential"
            )
        self._name = queue
        self._store = store
        self._own_store = own_store
        self._connection_string = connection_string
        self._namespace = namespace
        self._credential = credential
        self._client_options = client_options
        self._lease = float(lease)
        self._max_deliver = max_deliver
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None
        self._sender: Any = None
        self._receiver: Any = None
        self._lock = asyncio.Lock()
        self._sending = asyncio.Lock()
        self._receiving = asyncio.Lock()
        self._closed = False
        self._held: dict[str, _ServiceBusDelivery] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> ServiceBusBroker:
        """A broker for ``sb://[<key name>:<key>@]<namespace host>[:port]/<queue>``.

        The queue may be given as the option ``queue`` instead (``broker_from_url`` then names
        the store's keys after it too).

        A key name and key in the URL (URL-quoted) make a connection string; so does
        ``?emulator=true``, which speaks plain AMQP to ``host:port`` (a local emulator).
        Otherwise give ``credential=``. ``store`` is required.
        """
        if "store" not in options:
            raise BuilderError("ServiceBusBroker needs a store= for task states (a RedisTaskStore)")
        parts = urlsplit(url)
        queue = unquote(parts.path.strip("/"))
        named = options.pop("queue", queue)  # broker_from_url passes it on to the store too
        if named != queue and queue:
            raise BuilderError(f"the URL names queue {queue!r}, the options {named!r}")
        queue = queue or named
        if not queue or not parts.hostname:
            raise BuilderError(f"a Service Bus URL names a namespace and a queue, got {url!r}")
        query: dict[str, Any] = dict(parse_qsl(parts.query))
        emulator = str(query.pop("emulator", "")).lower() in ("1", "true", "yes")
        for key, kind in (("lease", float), ("max_deliver", int), ("max_delivery_count", int)):
            if key in query:
                try:
                    query[key] = kind(query[key])
                except ValueError:
                    raise BuilderError(f"{key} in {url!r} is not a number") from None
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        if parts.username or emulator:
            connection_string = (
                f"Endpoint=sb://{host}/;SharedAccessKeyName={unquote(parts.username or 'key')};"
                f"SharedAccessKey={unquote(parts.password or 'key')}"
                + (";UseDevelopmentEmulator=true" if emulator else "")
            )
            options.setdefault("connection_string", connection_string)
        else:
            options.setdefault("namespace", host)
        return cls(queue, **{**query, **options})

    @property
    def lease(self) -> float:
        """Seconds a lock and a task's lease last without a heartbeat."""
        return self._lease

    @property
    def max_deliver(self) -> int:
        """Attempts a task gets before it is dead-lettered."""
        return self._max_deliver

    @property
    def store(self) -> TaskStore:
        """Where task states live."""
        return self._store

    async def __aenter__(self) -> ServiceBusBroker:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the links and the client (and the store, when it is this broker's).

        Messages this handle holds stay locked until their lock expires, then come back.
        """
        if self._closed:
            return
        self._closed = True
        await self._stack.aclose()
        await self._close_store()

    async def _ready(self) -> Any:
        if self._client is None:
            async with self._lock:
                if self._closed:
                    raise DaimonError("the broker is closed")
                if self._client is None:
                    client = self._make_client()
                    self._client = await self._stack.enter_async_context(client)
        return self._client

    def _make_client(self) -> Any:
        client_class = servicebus_aio.ServiceBusClient
        if self._connection_string is not None:
            return client_class.from_connection_string(
                self._connection_string, **self._client_options
            )
        return client_class(self._namespace, self._credential, **self._client_options)

    async def _send(self, body: str, task_id: str, delay: float = 0.0) -> None:
        client = await self._ready()
        if self._sender is None:
            async with self._lock:
                if self._sender is None:
                    sender = client.get_queue_sender(self._name)
                    self._sender = await self._stack.enter_async_context(sender)
        scheduled = None
        if delay > 0:
            scheduled = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=delay)
        message = servicebus.ServiceBusMessage(
            body,
            message_id=task_id,
            content_type="application/json",
            application_properties={"task_id": task_id},
            scheduled_enqueue_time_utc=scheduled,
        )
        async with self._sending:
            await self._sender.send_messages(message)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks, peeked from the dead-letter sub-queue.

        ``peek_messages`` takes no lock and changes nothing; messages come in sequence order
        (the order they were dead-lettered). Service Bus keeps no dead-lettering time, so
        ``dead_at`` is ``0.0``. The reason and attempt count come from the task store.
        """
        check_dead_letter_limit(limit)
        client = await self._ready()
        receiver = client.get_queue_receiver(
            self._name, sub_queue=servicebus.ServiceBusSubQueue.DEAD_LETTER
        )
        peeked: list[Any] = []
        async with receiver:
            while len(peeked) < limit:
                start = peeked[-1].sequence_number + 1 if peeked else 0
                batch = await receiver.peek_messages(
                    max_message_count=limit - len(peeked), sequence_number=start
                )
                if not batch:
                    break
                peeked.extend(batch)
        letters = []
        for message in peeked:
            why = message.dead_letter_error_description or message.dead_letter_reason or ""
            letters.append(
                await dead_letter_from_store(
                    self._store,
                    b"".join(message.body),
                    str(message.message_id or ""),
                    str(why),
                    0.0,
                )
            )
        return oldest_dead_letters(letters, limit)

    async def _call(self, operation: str, message: Any, **options: Any) -> Any:
        """``complete_message``, ``dead_letter_message`` or ``renew_message_lock``."""
        async with self._receiving:
            return await getattr(self._receiver, operation)(message, **options)

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task`` (once Service Bus has it); a started or ended task is not queued again.

        Raises:
            BrokerError: The message could not be sent; no record of the task was kept.
        """
        payload = dumps(task)

        async def send() -> None:
            await self._send_task(task.task_id, payload)

        # A duplicate message is harmless: the store lets one delivery run, and completes the
        # other once the task has ended.
        return await submit_through(self._store, task.task_id, send)

    async def _send_task(self, task_id: str, payload: str) -> None:
        await self._send(payload, task_id)

    async def claim(self, wait: float = 1.0) -> _ServiceBusDelivery | None:
        """The next task, waiting up to ``wait`` seconds for one."""
        client = await self._ready()
        if self._receiver is None:
            async with self._lock:
                if self._receiver is None:  # opened before the wait starts: it takes a while
                    receiver = client.get_queue_receiver(
                        self._name,
                        receive_mode=servicebus.ServiceBusReceiveMode.PEEK_LOCK,
                        prefetch_count=0,
                    )
                    self._receiver = await self._stack.enter_async_context(receiver)
        deadline = time.monotonic() + max(wait, 0.0)
        reconnected = False
        while True:
            # Short waits: settlements and lock renewals queue behind this one.
            left = min(max(deadline - time.monotonic(), 0.05), _SLICE)
            try:
                async with self._receiving:
                    # Reopens a receiver whose connection Service Bus closed, under the SDK's
                    # retry policy: a receive would reopen it within its own short wait.
                    await self._receiver.__aenter__()
                    messages = await self._receiver.receive_messages(
                        max_message_count=1, max_wait_time=left
                    )
            except servicebus_exceptions.ServiceBusConnectionError:
                if reconnected:
                    raise
                reconnected = True  # found the connection closed: reopen once, then give up
                continue
            for message in messages:
                delivery = await self._begin(message)
                if delivery is not None:
                    return delivery
            if time.monotonic() >= deadline:
                return None

    async def _fresh(self, message: Any) -> bool:
        """Whether ``message`` is still locked for long enough to start on.

        The SDK leaves link credit open after a receive that timed out, so a message can arrive
        and wait in its buffer, locked, until the next claim: its lock may have run out since
        (Service Bus has then delivered it again), or be nearly out (renew it first).
        """
        locked_until = message.locked_until_utc
        if locked_until is None:
            return True
        left = (locked_until - datetime.datetime.now(datetime.UTC)).total_seconds()
        if left > self._lease / 2:
            return True
        if left > 0:
            with contextlib.suppress(servicebus_exceptions.ServiceBusError):
                await self._call("renew_message_lock", message)
                return True
        _log.debug("message %r waited out its lock in the SDK's buffer", message.message_id)
        return False

    async def _begin(self, message: Any) -> _ServiceBusDelivery | None:
        if not await self._fresh(message):
            return None
        body = b"".join(message.body).decode("utf-8", errors="replace")
        try:
            task = loads(body, AgentTask)
        except SerializationError as exc:
            await self._unreadable(message, body, f"SerializationError: {exc}")
            return None
        outcome, value = await self._store.begin(
            task.task_id, lease=self._lease, max_deliver=self._max_deliver, payload=body
        )
        if outcome == "skip":
            await self._call("complete_message", message)
            return None
        if outcome == "busy":  # a duplicate, or a retry before its delay: back after that
            await self._send(body, task.task_id, delay=value)
            await self._call("complete_message", message)
            return None
        if outcome == "dead":
            why = (await self._store.status(task.task_id)).error or "attempts spent"
            await self._call(
                "dead_letter_message",
                message,
                reason="attempts spent",
                error_description=why[:_MAX_TEXT],
            )
            return None
        task = dataclasses.replace(task, attempt=int(value))
        return _ServiceBusDelivery(self, message, body, task)

    async def _unreadable(self, message: Any, body: str, error: str) -> None:
        """Dead-letter a message that is not a task; fail its task if daimon knows the id."""
        task_id = str(message.message_id or "")
        _log.error("message %r is not a task, dead-lettering it: %s", task_id, error)
        outcome, value = "unknown", 0.0
        if task_id:
            outcome, value = await self._store.begin(
                task_id, lease=self._lease, max_deliver=self._max_deliver, payload=body
            )
        if outcome == "run":
            placeholder = AgentTask(task_id=task_id, input="", attempt=int(value))
            await _ServiceBusDelivery(self, message, body, placeholder).fail(error)
        else:
            await self._call(
                "dead_letter_message",
                message,
                reason="not a task",
                error_description=error[:_MAX_TEXT],
            )


class _ServiceBusDelivery(StoreDelivery):
    __slots__ = ("_body", "_broker", "_message")

    _service_errors = _SERVICE_ERRORS

    def __init__(self, broker: ServiceBusBroker, message: Any, body: str, task: AgentTask):
        super().__init__(broker._store, task, lease=broker._lease, max_deliver=broker._max_deliver)
        self._broker = broker
        self._message = message
        self._body = body

    async def heartbeat(self) -> bool:
        if not await super().heartbeat():
            return False
        try:
            await self._broker._call("renew_message_lock", self._message)
        except (servicebus_exceptions.ServiceBusError, ValueError):  # lost, or settled
            return False
        return True

    async def _answer(self, outcome: str, *, delay: float, error: str) -> None:
        broker, message = self._broker, self._message
        try:
            if outcome in ("ok", "paused", "ended"):
                await broker._call("complete_message", message)
            elif outcome == "dead":
                why = (await broker._store.status(self.task.task_id)).error or error
                await broker._call(
                    "dead_letter_message",
                    message,
                    reason="failed",
                    error_description=why[:_MAX_TEXT],
                )
            elif outcome in ("requeued", "released"):
                # A copy, not an abandon: Service Bus's delivery count must not grow with it.
                seconds = delay if outcome == "requeued" else 0.0
                await broker._send(self._body, self.task.task_id, delay=seconds)
                await broker._call("complete_message", message)
            # stale: a newer attempt holds the message (its lock is not ours any more)
        except (servicebus_exceptions.ServiceBusError, ValueError):
            _log.warning(
                "could not settle the message of task %s", self.task.task_id, exc_info=True
            )
