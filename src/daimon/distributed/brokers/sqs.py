"""A task broker on Amazon SQS (aiobotocore), with task states in a separate task store.

Queues: ``<queue>``, a standard queue whose visibility timeout is the lease, and
``<queue>-dead``, where dead-lettered tasks go. ``submit`` returns once ``SendMessage`` has
answered (SQS has stored the message redundantly). A worker receives with long polling; a
heartbeat extends the message's visibility (``ChangeMessageVisibility``) and renews the task's
lease in the store; a message whose worker died becomes visible again when its visibility
timeout ends, and runs as a new attempt.

SQS is not a key-value store, so task states live in a ``store`` (a
:class:`~daimon.distributed.brokers.redis.RedisTaskStore`, or anything with its methods),
which counts attempts: after the last allowed one the task is moved to ``<queue>-dead`` by
daimon (sent there, then deleted), with its status saying why. A redrive policy
(``maxReceiveCount``) is not used: a graceful hand-back must not use up an attempt, and a
message moved by SQS itself would leave the task without a terminal status.

Visibility timeouts are whole seconds in SQS: the lease and retry delays round up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError, DaimonError, SerializationError
from daimon.core.optional import require
from daimon.core.tasks import AgentTask, DeadLetter
from daimon.kit.checks import check_positive
from daimon.kit.task_records import (
    MAX_DEAD_LETTERS,
    StoreBackedBroker,
    StoreDelivery,
    TaskStore,
    check_dead_letter_limit,
    dead_letter_from_store,
    oldest_dead_letters,
    submit_through,
)

aiobotocore_session = require("aiobotocore.session", extra="sqs")
botocore_exceptions = require("botocore.exceptions", extra="sqs")

__all__ = ("SqsBroker",)

_log = logging.getLogger("daimon.distributed")
_SERVICE_ERRORS = (botocore_exceptions.BotoCoreError, botocore_exceptions.ClientError, OSError)
"""What aiobotocore raises when SQS fails, refuses or cannot be reached: raised as BrokerError."""
_MAX_VISIBILITY = 12 * 3600
_SCAN_VISIBILITY = 30
"""Seconds a dead letter stays hidden while :meth:`SqsBroker.dead_letters` reads the queue."""


def _seconds(value: float) -> int:
    """A visibility timeout in whole seconds (SQS's unit), rounded up, within SQS's bounds."""
    return min(max(math.ceil(value), 0), _MAX_VISIBILITY)


class SqsBroker(StoreBackedBroker):
    """Queues tasks in Amazon SQS; see the module docstring.

    Args:
        queue: The queue's name (created by :meth:`setup` if missing).
        store: Where task states live (a ``RedisTaskStore``); closed by :meth:`aclose` when
            ``own_store``.
        region: The AWS region.
        endpoint_url: Another endpoint (a local emulator such as moto or ElasticMQ).
        lease: Seconds a delivery stays invisible without a heartbeat (whole seconds).
        max_deliver: Attempts a task gets before it is dead-lettered.
        own_store: Close ``store`` with this broker.
        client_options: More keyword arguments for ``create_client("sqs", ...)``
            (credentials, ``config``).
    """

    _service_errors = _SERVICE_ERRORS

    def __init__(
        self,
        queue: str,
        *,
        store: TaskStore,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        lease: float = 30.0,
        max_deliver: int = 5,
        own_store: bool = False,
        **client_options: Any,
    ) -> None:
        if not lease >= 1:
            raise BuilderError(f"lease must be at least 1 second on SQS, got {lease!r}")
        check_positive("max_deliver", max_deliver)
        if not queue:
            raise BuilderError("queue must not be empty")
        self._name = queue
        self._store = store
        self._own_store = own_store
        self._region = region
        self._endpoint = endpoint_url
        self._client_options = client_options
        self._lease = float(_seconds(lease))
        self._max_deliver = max_deliver
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None
        self._url = ""
        self._dead_url = ""
        self._lock = asyncio.Lock()
        self._closed = False
        self._held: dict[str, _SqsDelivery] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqsBroker:
        """A broker for ``sqs://<queue>?region=...&endpoint_url=http://...``; ``store`` is required.

        Query parameters ``region`` and ``endpoint_url`` become options; so does a host other
        than the queue name's (``sqs://localhost:4566/<queue>`` means ``endpoint_url`` =
        ``http://localhost:4566``). A ``queue`` option overrides the URL's.
        """
        if "store" not in options:
            raise BuilderError("SqsBroker needs a store= for task states (a RedisTaskStore)")
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        if parts.path.strip("/"):
            query.setdefault("endpoint_url", f"http://{parts.netloc}")
        queue = options.pop("queue", None) or cls.queue_in_url(url)  # broker_from_url's rule
        return cls(queue, **{**query, **options})

    @staticmethod
    def queue_in_url(url: str) -> str:
        """The queue an ``sqs://`` URL names."""
        parts = urlsplit(url)
        return parts.path.strip("/") or parts.netloc

    @property
    def store(self) -> TaskStore:
        """Where task states live."""
        return self._store

    async def setup(self) -> None:
        """Create the queue and the dead-letter queue if they are missing."""
        await self._ready()

    async def aclose(self) -> None:
        """Close the client (and the store, when it is this broker's); safe to call again.

        Messages this handle holds become visible again when their visibility timeout ends.
        """
        if self._closed:
            return
        self._closed = True
        await self._stack.aclose()
        await self._close_store()

    async def _ready(self) -> Any:
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    await self._open()
        return self._client

    async def _open(self) -> None:
        if self._closed:
            raise DaimonError("the broker is closed")
        session = aiobotocore_session.get_session()
        client = await self._stack.enter_async_context(
            session.create_client(
                "sqs",
                region_name=self._region,
                endpoint_url=self._endpoint,
                **self._client_options,
            )
        )
        visibility = str(_seconds(self._lease))
        self._url = await _queue_url(client, self._name, {"VisibilityTimeout": visibility})
        self._dead_url = await _queue_url(client, f"{self._name}-dead", {})
        self._client = client

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task`` (once SQS has stored it); a started or ended task is not queued again.

        Raises:
            BrokerError: The message could not be sent; no record of the task was kept.
        """
        payload = dumps(task)
        await self._ready()

        async def send() -> None:
            await self._send_task(task.task_id, payload)

        # A duplicate message is harmless: the store lets one delivery run, and deletes the
        # other once the task has ended.
        return await submit_through(self._store, task.task_id, send)

    async def _send_task(self, task_id: str, payload: str) -> None:
        client = await self._ready()
        await client.send_message(
            QueueUrl=self._url,
            MessageBody=payload,
            MessageAttributes={"task_id": {"DataType": "String", "StringValue": task_id}},
        )

    async def claim(self, wait: float = 1.0) -> _SqsDelivery | None:
        """The next task, waiting up to ``wait`` seconds (long polling) for one."""
        client = await self._ready()
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            left = deadline - time.monotonic()
            reply = await client.receive_message(
                QueueUrl=self._url,
                MaxNumberOfMessages=1,
                WaitTimeSeconds=min(int(max(left, 0)), 20),
                VisibilityTimeout=_seconds(self._lease),
                MessageAttributeNames=["task_id"],
            )
            for message in reply.get("Messages", []):
                delivery = await self._begin(message)
                if delivery is not None:
                    return delivery
            if time.monotonic() >= deadline:
                return None
            if not reply.get("Messages"):
                await asyncio.sleep(min(0.05, max(deadline - time.monotonic(), 0)))

    async def _begin(self, message: dict[str, Any]) -> _SqsDelivery | None:
        body: str = message["Body"]
        receipt: str = message["ReceiptHandle"]
        try:
            task: AgentTask | None = loads(body, AgentTask)
            error = ""
        except SerializationError as exc:
            task, error = None, f"SerializationError: {exc}"
        attribute = message.get("MessageAttributes", {}).get("task_id", {})
        task_id = task.task_id if task is not None else attribute.get("StringValue", "")
        try:
            outcome, value = await self._store.begin(
                task_id, lease=self._lease, max_deliver=self._max_deliver, payload=body
            )
        except BuilderError:  # no task id at all
            await self._dead_letter(body, receipt, "no task id")
            return None
        if outcome == "skip":
            await self._client.delete_message(QueueUrl=self._url, ReceiptHandle=receipt)
            return None
        if outcome == "busy":  # a duplicate, or a retry before its delay: back after that
            await self._client.change_message_visibility(
                QueueUrl=self._url, ReceiptHandle=receipt, VisibilityTimeout=_seconds(value)
            )
            return None
        if outcome == "dead":
            await self._dead_letter(body, receipt, "attempts spent")
            return None
        attempt = int(value)
        if task is None:  # undecodable: dead-letter it rather than fail on it forever
            _log.error("task %s cannot be read, dead-lettering it: %s", task_id, error)
            placeholder = AgentTask(task_id=task_id, input="", attempt=attempt)
            await _SqsDelivery(self, receipt, body, placeholder).fail(error)
            return None
        return _SqsDelivery(self, receipt, body, dataclasses.replace(task, attempt=attempt))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks, from ``<queue>-dead``; none is removed.

        SQS cannot peek, and a receive with ``VisibilityTimeout=0`` returns the same first
        messages every time, so this receives the dead letters (up to 10,000) hidden for a short
        while, then makes every one visible again (``ChangeMessageVisibility`` to 0); a message
        is never deleted, so if this reader dies first, they reappear on their own within 30
        seconds. Standard queues keep no order, so all are read and sorted by
        ``SentTimestamp``. A short-poll receive samples SQS's servers: on a large queue a
        listing may miss some. A second reader at the same moment sees only what this one
        left visible. The reason and attempt count come from the task store.
        """
        check_dead_letter_limit(limit)
        client = await self._ready()
        received: list[dict[str, Any]] = []
        try:
            while len(received) < MAX_DEAD_LETTERS:
                batch = (
                    await client.receive_message(
                        QueueUrl=self._dead_url,
                        MaxNumberOfMessages=10,
                        VisibilityTimeout=_SCAN_VISIBILITY,
                        WaitTimeSeconds=0,
                        AttributeNames=["SentTimestamp"],
                        MessageAttributeNames=["error"],
                    )
                ).get("Messages", [])
                if not batch:
                    break
                received.extend(batch)
        finally:
            for start in range(0, len(received), 10):
                await client.change_message_visibility_batch(
                    QueueUrl=self._dead_url,
                    Entries=[
                        {
                            "Id": str(n),
                            "ReceiptHandle": message["ReceiptHandle"],
                            "VisibilityTimeout": 0,
                        }
                        for n, message in enumerate(received[start : start + 10])
                    ],
                )
        letters = []
        for message in received:
            why = message.get("MessageAttributes", {}).get("error", {}).get("StringValue", "")
            sent = int(message.get("Attributes", {}).get("SentTimestamp", 0))
            letters.append(
                await dead_letter_from_store(self._store, message["Body"], "", why, sent / 1000)
            )
        return oldest_dead_letters(letters, limit)

    async def _dead_letter(self, body: str, receipt: str, error: str) -> None:
        """Move a message to the dead-letter queue: send it there, then delete it here."""
        await self._client.send_message(
            QueueUrl=self._dead_url,
            MessageBody=body,
            MessageAttributes={"error": {"DataType": "String", "StringValue": error[:1000]}},
        )
        await self._client.delete_message(QueueUrl=self._url, ReceiptHandle=receipt)


async def _queue_url(client: Any, name: str, attributes: dict[str, str]) -> str:
    """Create queue ``name`` if it is missing; its URL.

    A queue made by a handle with another lease has another default visibility timeout, and
    ``CreateQueue`` refuses different attributes: such a queue is used as it is (every receive
    sets its own visibility timeout).
    """
    try:
        made = await client.create_queue(QueueName=name, Attributes=attributes)
    except botocore_exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in (
            "QueueAlreadyExists",
            "QueueNameExists",
        ):
            raise
        made = await client.get_queue_url(QueueName=name)
    url: str = made["QueueUrl"]
    return url


class _SqsDelivery(StoreDelivery):
    __slots__ = ("_body", "_broker", "_receipt")

    _service_errors = _SERVICE_ERRORS

    def __init__(self, broker: SqsBroker, receipt: str, body: str, task: AgentTask) -> None:
        super().__init__(broker._store, task, lease=broker._lease, max_deliver=broker._max_deliver)
        self._broker = broker
        self._receipt = receipt
        self._body = body

    async def heartbeat(self) -> bool:
        if not await super().heartbeat():
            return False
        broker = self._broker
        try:
            await broker._client.change_message_visibility(
                QueueUrl=broker._url,
                ReceiptHandle=self._receipt,
                VisibilityTimeout=_seconds(broker._lease),
            )
        except botocore_exceptions.ClientError:  # the receipt is stale: received again since
            return False
        return True

    async def _answer(self, outcome: str, *, delay: float, error: str) -> None:
        broker = self._broker
        client, url = broker._client, broker._url
        try:
            if outcome in ("ok", "paused", "ended"):
                await client.delete_message(QueueUrl=url, ReceiptHandle=self._receipt)
            elif outcome == "dead":
                await broker._dead_letter(self._body, self._receipt, error)
            elif outcome in ("requeued", "released"):
                seconds = _seconds(delay) if outcome == "requeued" else 0
                await client.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=self._receipt, VisibilityTimeout=seconds
                )
            # stale: another attempt received the message since; its receipt is not ours
        except botocore_exceptions.ClientError:
            _log.warning(
                "could not answer the message of task %s", self.task.task_id, exc_info=True
            )
