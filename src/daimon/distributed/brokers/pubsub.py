"""A task broker on Google Cloud Pub/Sub, with task states in a separate task store.

Topics and subscriptions, named after ``queue``: the topic ``<queue>`` and its pull
subscription ``<queue>-workers``; the dead-letter topic ``<queue>-dead`` and its subscription
``<queue>-dead-keep``, which holds dead letters until someone reads them. ``submit`` returns
once ``Publish`` has answered (Pub/Sub has stored the message). A worker pulls one message at a
time; its ack deadline is set to the lease at once, and a heartbeat extends it
(``ModifyAckDeadline``) and renews the task's lease in the store. A message whose worker died is
delivered again when its ack deadline passes, and runs as a new attempt.

Pub/Sub cannot answer ``status()``, so task states live in a ``store`` (a
:class:`~daimon.distributed.brokers.redis.RedisTaskStore`, or anything with its methods),
which counts attempts. After the last allowed one daimon publishes the task to ``<queue>-dead``
(with the reason in the attribute ``error``) and acks it, and its status says why. The
subscription's own ``dead_letter_policy`` points at the same topic, but only as a backstop
(``policy_attempts``, 100 by default) for a message that daimon cannot settle at all: Pub/Sub
counts every delivery, including graceful hand-backs and duplicates, its minimum is 5 (so
``max_deliver`` below 5 could not be expressed), and a message it dead-letters by itself
leaves its task without a terminal status. (The emulator honours the policy and numbers
deliveries in ``delivery_attempt``, as the service does.)

The emulator keeps everything in memory: restarting it loses the topics, the subscriptions and
every message. The broker creates its topic and subscription again when they are missing, and
submitting a task whose status is still ``pending`` (never started) publishes it again.

Ack deadlines are whole seconds (at most 600): the lease and retry delays round up. Set
``emulator_host`` (or the environment's ``PUBSUB_EMULATOR_HOST``) to use the Pub/Sub emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import re
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError, DaimonError, SerializationError
from daimon.core.optional import require
from daimon.core.tasks import AgentTask, DeadLetter
from daimon.kit.task_records import (
    MAX_DEAD_LETTERS,
    StoreBackedBroker,
    StoreDelivery,
    TaskStore,
    check_dead_letter_limit,
    check_options,
    dead_letter_from_store,
    oldest_dead_letters,
    submit_through,
)

grpc = require("grpc", extra="pubsub")
pubsub = require("google.pubsub_v1", extra="pubsub")
publisher_transports = require("google.pubsub_v1.services.publisher.transports", extra="pubsub")
subscriber_transports = require("google.pubsub_v1.services.subscriber.transports", extra="pubsub")
api_exceptions = require("google.api_core.exceptions", extra="pubsub")
api_retry = require("google.api_core.retry", extra="pubsub")

__all__ = ("PubSubBroker",)

_SCAN_WAIT = 1.0
"""Seconds one pull of :meth:`PubSubBroker.dead_letters` waits for more dead letters."""

_log = logging.getLogger("daimon.distributed")
_SERVICE_ERRORS = (api_exceptions.GoogleAPIError, grpc.RpcError, OSError)
"""What the Pub/Sub client raises when Pub/Sub fails or cannot be reached: raised as
BrokerError."""
_MAX_DEADLINE = 600
# Reconnect quickly when the emulator comes back (gRPC's default backoff grows to two minutes).
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9._~%+-]{2,254}$")


def _seconds(value: float) -> int:
    """An ack deadline in whole seconds (Pub/Sub's unit), rounded up, within its bounds."""
    return min(max(math.ceil(value), 0), _MAX_DEADLINE)


class PubSubBroker(StoreBackedBroker):
    """Queues tasks in Google Cloud Pub/Sub; see the module docstring.

    Args:
        project: The Google Cloud project.
        queue: The topic's name (3 to 255 characters, starting with a letter); the
            subscription and the dead-letter topic are named after it.
        store: Where task states live (a ``RedisTaskStore``); closed by :meth:`aclose` when
            ``own_store``.
        lease: Seconds a delivery stays leased without a heartbeat (whole seconds, 1 to 600).
        max_deliver: Attempts a task gets before it is dead-lettered (any positive number: the
            store counts them).
        policy_attempts: ``max_delivery_attempts`` of the subscription's dead-letter policy
            (5 to 100), a backstop for messages daimon cannot settle.
        emulator_host: ``host:port`` of a Pub/Sub emulator (default: ``PUBSUB_EMULATOR_HOST``).
        own_store: Close ``store`` with this broker.
        timeout: Seconds a call to Pub/Sub may take, retries included; then it raises
            :class:`~daimon.core.errors.BrokerError`.
    """

    _service_errors = _SERVICE_ERRORS

    def __init__(
        self,
        project: str,
        queue: str,
        *,
        store: TaskStore,
        lease: float = 30.0,
        max_deliver: int = 5,
        policy_attempts: int = 100,
        emulator_host: str | None = None,
        own_store: bool = False,
        timeout: float = 30.0,
    ) -> None:
        check_options(lease, max_deliver)
        if not 1 <= lease <= _MAX_DEADLINE:
            raise BuilderError(
                f"lease must be 1 to {_MAX_DEADLINE} seconds on Pub/Sub, got {lease!r}"
            )
        if type(policy_attempts) is not int or not 5 <= policy_attempts <= 100:
            raise BuilderError(f"policy_attempts must be 5 to 100, got {policy_attempts!r}")
        if not project:
            raise BuilderError("project must not be empty")
        if not _NAME.match(queue) or queue.startswith("goog"):
            raise BuilderError(
                "queue must be 3 to 255 letters, digits and -._~%+, starting with a letter "
                f"(not goog), got {queue!r}"
            )
        self._project = project
        self._queue = queue
        self._topic = f"projects/{project}/topics/{queue}"
        self._dead_topic = f"projects/{project}/topics/{queue}-dead"
        self._subscription = f"projects/{project}/subscriptions/{queue}-workers"
        self._dead_subscription = f"projects/{project}/subscriptions/{queue}-dead-keep"
        self._store = store
        self._own_store = own_store
        self._lease = float(_seconds(lease))
        self._max_deliver = max_deliver
        self._policy_attempts = policy_attempts
        self._emulator = emulator_host or os.environ.get("PUBSUB_EMULATOR_HOST") or None
        self._timeout = timeout
        # Transient errors are retried, within ``timeout`` in all: the client's own policy
        # retries a publish for a minute while Pub/Sub cannot be reached.
        self._retry = api_retry.AsyncRetry(
            predicate=api_retry.if_transient_error, initial=0.1, maximum=1.0, timeout=timeout
        )
        self._publisher: Any = None
        self._subscriber: Any = None
        self._channels: list[Any] = []
        self._lock = asyncio.Lock()
        self._closed = False
        self._held: dict[str, _PubSubDelivery] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PubSubBroker:
        """A broker for ``pubsub://<project>/<queue>``; ``store`` is required.

        Query parameters become options (``lease``, ``max_deliver``, ``emulator_host``); a
        ``queue`` option overrides the URL's.
        """
        if "store" not in options:
            raise BuilderError("PubSubBroker needs a store= for task states (a RedisTaskStore)")
        parts = urlsplit(url)
        if parts.scheme != "pubsub" or not parts.netloc:
            raise BuilderError(f"not a Pub/Sub broker URL (pubsub://project/queue): {url!r}")
        query: dict[str, Any] = dict(parse_qsl(parts.query))
        for name, kind in (("lease", float), ("max_deliver", int), ("policy_attempts", int)):
            if name in query:
                query[name] = kind(query[name])
        queue = options.pop("queue", None) or cls.queue_in_url(url)
        return cls(parts.netloc, queue, **{**query, **options})

    @staticmethod
    def queue_in_url(url: str) -> str:
        """The queue (topic) a ``pubsub://project/queue`` URL names (default ``daimon-tasks``)."""
        return urlsplit(url).path.strip("/") or "daimon-tasks"

    @property
    def store(self) -> TaskStore:
        """Where task states live."""
        return self._store

    @property
    def subscription(self) -> str:
        """The workers' subscription's full name."""
        return self._subscription

    @property
    def dead_subscription(self) -> str:
        """The subscription that keeps dead letters."""
        return self._dead_subscription

    async def setup(self) -> None:
        """Create the topics and subscriptions if they are missing."""
        await self._ready()

    async def aclose(self) -> None:
        """Close the clients (and the store, when it is this broker's); safe to call again.

        Messages this handle holds are delivered again when their ack deadline passes.
        """
        if self._closed:
            return
        self._closed = True
        for channel in self._channels:
            await channel.close()
        for client in (self._publisher, self._subscriber):
            if client is not None and not self._channels:
                await client.transport.close()
        await self._close_store()

    async def _ready(self) -> Any:
        if self._subscriber is None:
            async with self._lock:
                if self._subscriber is None:
                    await self._open()
        return self._subscriber

    async def _open(self) -> None:
        if self._closed:
            raise DaimonError("the broker is closed")
        if self._emulator:
            channels = [
                grpc.aio.insecure_channel(self._emulator, options=_CHANNEL_OPTIONS)
                for _ in range(2)
            ]
            self._channels = channels
            # The emulator wants no credentials: the transports use these channels as they are.
            publisher = pubsub.PublisherAsyncClient(
                transport=publisher_transports.PublisherGrpcAsyncIOTransport(channel=channels[0]),
            )
            subscriber = pubsub.SubscriberAsyncClient(
                transport=subscriber_transports.SubscriberGrpcAsyncIOTransport(channel=channels[1]),
            )
        else:
            publisher, subscriber = pubsub.PublisherAsyncClient(), pubsub.SubscriberAsyncClient()
        await self._create(publisher, subscriber)
        self._publisher, self._subscriber = publisher, subscriber

    async def _create(self, publisher: Any, subscriber: Any) -> None:
        """Create the topics and subscriptions that are missing."""
        for topic in (self._topic, self._dead_topic):
            with contextlib.suppress(api_exceptions.AlreadyExists):
                await publisher.create_topic(name=topic, timeout=self._timeout, retry=self._retry)
        with contextlib.suppress(api_exceptions.AlreadyExists):
            await subscriber.create_subscription(
                request={"name": self._dead_subscription, "topic": self._dead_topic},
                timeout=self._timeout,
                retry=self._retry,
            )
        with contextlib.suppress(api_exceptions.AlreadyExists):
            await subscriber.create_subscription(
                request={
                    "name": self._subscription,
                    "topic": self._topic,
                    "ack_deadline_seconds": max(_seconds(self._lease), 10),
                    "dead_letter_policy": {
                        "dead_letter_topic": self._dead_topic,
                        "max_delivery_attempts": self._policy_attempts,
                    },
                },
                timeout=self._timeout,
                retry=self._retry,
            )

    async def _recreate(self) -> None:
        """The topic or subscription is gone (deleted, or an emulator restarted): make it again."""
        _log.warning("Pub/Sub topic or subscription of %s is missing; creating it", self._topic)
        async with self._lock:
            await self._create(self._publisher, self._subscriber)

    async def _publish(self, topic: str, payload: str, attributes: dict[str, str]) -> None:
        message = pubsub.PubsubMessage(data=payload.encode("utf-8"), attributes=attributes)
        try:
            await self._publisher.publish(
                topic=topic, messages=[message], timeout=self._timeout, retry=self._retry
            )
        except api_exceptions.NotFound:
            await self._recreate()
            await self._publisher.publish(
                topic=topic, messages=[message], timeout=self._timeout, retry=self._retry
            )

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task`` (once Pub/Sub has stored it); a started or ended task is not requeued.

        Raises:
            BrokerError: The message could not be sent; no record of the task was kept.
        """
        payload = dumps(task)
        await self._ready()

        async def send() -> None:
            await self._send_task(task.task_id, payload)

        # A duplicate message is harmless: the store lets one delivery run, and acks the other
        # once the task has ended.
        return await submit_through(self._store, task.task_id, send)

    async def _send_task(self, task_id: str, payload: str) -> None:
        await self._ready()
        await self._publish(self._topic, payload, {"task_id": task_id})

    async def claim(self, wait: float = 1.0) -> _PubSubDelivery | None:
        """The next task, waiting up to ``wait`` seconds for one."""
        subscriber = await self._ready()
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            left = deadline - time.monotonic()
            try:
                reply = await subscriber.pull(
                    request={"subscription": self._subscription, "max_messages": 1},
                    timeout=max(left, 0.5),
                    retry=None,
                )
                received = list(reply.received_messages)
            except api_exceptions.DeadlineExceeded:
                received = []
            except api_exceptions.NotFound:
                await self._recreate()
                received = []
            for message in received:
                delivery = await self._begin(message)
                if delivery is not None:
                    return delivery
            if time.monotonic() >= deadline:
                return None
            if not received:
                await asyncio.sleep(min(0.05, max(deadline - time.monotonic(), 0)))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks, from ``<queue>-dead-keep``; none is removed.

        Pub/Sub cannot peek, so this pulls the dead letters (up to 10,000) and hands every one
        back at once with ``modify_ack_deadline(0)``; nothing is acknowledged, so if this reader
        dies first they come back when their ack deadline passes. Pulled messages are sorted by
        publish time. Each read counts as a delivery on that subscription, and a second reader
        at the same moment sees only what this one left. The reason and attempt count come
        from the task store.
        """
        check_dead_letter_limit(limit)
        subscriber = await self._ready()
        received: list[Any] = []
        try:
            while len(received) < MAX_DEAD_LETTERS:
                try:
                    reply = await subscriber.pull(
                        request={
                            "subscription": self._dead_subscription,
                            "max_messages": 1000,
                        },
                        timeout=_SCAN_WAIT,
                        retry=None,
                    )
                except api_exceptions.DeadlineExceeded:
                    break
                if not reply.received_messages:
                    break
                received.extend(reply.received_messages)
        finally:
            for start in range(0, len(received), 1000):
                await subscriber.modify_ack_deadline(
                    subscription=self._dead_subscription,
                    ack_ids=[r.ack_id for r in received[start : start + 1000]],
                    ack_deadline_seconds=0,
                    timeout=self._timeout,
                    retry=self._retry,
                )
        letters = []
        for item in received:
            message = item.message
            published = message.publish_time
            letters.append(
                await dead_letter_from_store(
                    self._store,
                    bytes(message.data),
                    str(message.attributes.get("task_id", "")),
                    str(message.attributes.get("error", "")),
                    published.timestamp() if published else 0.0,
                )
            )
        return oldest_dead_letters(letters, limit)

    async def _ack(self, ack_id: str) -> None:
        await self._subscriber.acknowledge(
            subscription=self._subscription,
            ack_ids=[ack_id],
            timeout=self._timeout,
            retry=self._retry,
        )

    async def _extend(self, ack_id: str, seconds: float) -> None:
        await self._subscriber.modify_ack_deadline(
            subscription=self._subscription,
            ack_ids=[ack_id],
            ack_deadline_seconds=_seconds(seconds),
            timeout=self._timeout,
            retry=self._retry,
        )

    async def _begin(self, received: Any) -> _PubSubDelivery | None:
        ack_id: str = received.ack_id
        body = bytes(received.message.data).decode("utf-8", errors="replace")
        try:
            task: AgentTask | None = loads(body, AgentTask)
            error = ""
        except SerializationError as exc:
            task, error = None, f"SerializationError: {exc}"
        task_id = (
            task.task_id if task is not None else received.message.attributes.get("task_id", "")
        )
        try:
            outcome, value = await self._store.begin(
                task_id, lease=self._lease, max_deliver=self._max_deliver, payload=body
            )
        except BuilderError:  # no task id at all
            await self._dead_letter(body, ack_id, "no task id")
            return None
        if outcome == "skip":
            await self._ack(ack_id)
            return None
        if outcome == "busy":  # a duplicate, or a retry before its delay: back after that
            await self._extend(ack_id, value)
            return None
        if outcome == "dead":
            reason = (await self._store.status(task_id)).error or "attempts spent"
            await self._dead_letter(body, ack_id, reason)
            return None
        attempt = int(value)
        await self._extend(ack_id, self._lease)
        if task is None:  # undecodable: dead-letter it rather than fail on it forever
            _log.error("task %s cannot be read, dead-lettering it: %s", task_id, error)
            placeholder = AgentTask(task_id=task_id, input="", attempt=attempt)
            await _PubSubDelivery(self, ack_id, body, placeholder).fail(error)
            return None
        return _PubSubDelivery(self, ack_id, body, dataclasses.replace(task, attempt=attempt))

    async def _dead_letter(self, body: str, ack_id: str, error: str) -> None:
        """Move a message to the dead-letter topic: publish it there, then ack it here."""
        await self._publish(self._dead_topic, body, {"error": error[:1000]})
        await self._ack(ack_id)


class _PubSubDelivery(StoreDelivery):
    __slots__ = ("_ack_id", "_body", "_broker")

    _service_errors = _SERVICE_ERRORS

    def __init__(self, broker: PubSubBroker, ack_id: str, body: str, task: AgentTask) -> None:
        super().__init__(broker._store, task, lease=broker._lease, max_deliver=broker._max_deliver)
        self._broker = broker
        self._ack_id = ack_id
        self._body = body

    async def heartbeat(self) -> bool:
        if not await super().heartbeat():
            return False
        try:
            await self._broker._extend(self._ack_id, self._broker._lease)
        except api_exceptions.GoogleAPICallError:  # the ack id expired: delivered again since
            return False
        return True

    async def _answer(self, outcome: str, *, delay: float, error: str) -> None:
        broker = self._broker
        try:
            if outcome in ("ok", "paused", "ended"):
                await broker._ack(self._ack_id)
            elif outcome == "dead":
                await broker._dead_letter(self._body, self._ack_id, error)
            elif outcome == "requeued":
                await broker._extend(self._ack_id, delay)
            elif outcome == "released":
                await broker._extend(self._ack_id, 0)
            # stale: another attempt holds a newer delivery; this ack id is not its
        except api_exceptions.GoogleAPICallError:
            _log.warning(
                "could not answer the message of task %s", self.task.task_id, exc_info=True
            )
