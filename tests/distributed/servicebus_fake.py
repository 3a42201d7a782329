"""A fake of Azure Service Bus's AMQP 1.0 interface for tests: a server the real SDK talks to.

Microsoft's Service Bus emulator runs only in Docker, which this machine lacks, so the
``azure-servicebus`` SDK is pointed at this server instead, unchanged: a connection string with
``UseDevelopmentEmulator=true`` makes it speak plain AMQP (no TLS) to ``host:port``. The server
is built on Qpid Proton (``python-qpid-proton``) and written from the public documentation
("AMQP 1.0 in Azure Service Bus: request-response-based operations", "Message transfers, locks
and settlement"). It is a fake of the wire protocol, not of the service.

What it reproduces, per queue (created on first use, or by :meth:`ServiceBusFake.create_queue`):

* SASL ANONYMOUS and the ``$cbs`` node's ``put-token`` (every token is accepted);
* sender links to a queue (the message is stored, then ``accepted``); messages with an
  ``x-opt-scheduled-enqueue-time`` annotation become visible at that time;
* receiver links in peek-lock mode: each delivery locks its message for the queue's
  ``lock_duration``, carries the lock token as its delivery tag (and ``x-opt-lock-token``),
  ``x-opt-locked-until``, ``x-opt-enqueued-time``, ``x-opt-sequence-number`` and the header's
  ``delivery-count``; link credit and drain;
* dispositions, answered with the outcome applied (``rcv-settle-mode`` second): ``accepted``
  completes, ``modified`` abandons (delivery count + 1), ``released`` unlocks,
  ``rejected`` with ``com.microsoft:dead-letter`` moves the message to
  ``<queue>/$DeadLetterQueue`` with ``DeadLetterReason``/``DeadLetterErrorDescription``; a
  settlement with a lost lock is rejected with ``com.microsoft:message-lock-lost``;
* ``<queue>/$management`` operations ``com.microsoft:renew-lock``,
  ``com.microsoft:update-disposition`` and ``com.microsoft:peek-message``;
* lock expiry (redelivery, delivery count + 1) and ``max_delivery_count`` (then the message is
  dead-lettered with reason ``MaxDeliveryCountExceeded``); locks outlive the link that took
  them, as Service Bus's do;
* connections closed by the service (:meth:`ServiceBusFake.drop_connections`,
  ``amqp:connection:forced``).

* the Standard tier's 256 KiB message size limit: announced as the ``max-message-size`` of the
  links the client sends on, and a larger message is rejected with
  ``amqp:link:message-size-exceeded``.

What it does not: TLS, real authorization, topics and subscriptions, sessions, deferral,
duplicate detection, transactions, time-to-live, partitioning, durability (everything is in
memory), the HTTP management (ATOM) API, and other limits and throttling.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from proton import (
    UNDESCRIBED,
    Array,
    Condition,
    Data,
    Delivery,
    Endpoint,
    Link,
    Message,
    symbol,
    timestamp,
)
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

MAX_MESSAGE_SIZE = 256 * 1024
"""The largest message a queue takes, in bytes (Service Bus Standard tier)."""

__all__ = ("ServiceBusFake",)

_LOCK_LOST = "com.microsoft:message-lock-lost"
_DEAD_LETTER = "com.microsoft:dead-letter"
_DLQ = "/$deadletterqueue"
_MANAGEMENT = "/$management"
_TICK = 0.02


def _ms(seconds: float) -> timestamp:
    return timestamp(round(seconds * 1000))


@dataclasses.dataclass
class _Stored:
    """One message in a queue, with its lock while a receiver holds it."""

    message: Message
    sequence_number: int
    enqueued_at: float
    visible_at: float
    delivery_count: int = 0
    lock_token: uuid.UUID | None = None
    locked_until: float = 0.0


@dataclasses.dataclass
class _Queue:
    name: str
    lock_duration: float
    max_delivery_count: int
    ready: list[_Stored] = dataclasses.field(default_factory=list)
    locked: dict[uuid.UUID, _Stored] = dataclasses.field(default_factory=dict)
    next_sequence: int = 1

    def add(self, stored: _Stored) -> None:
        stored.sequence_number = self.next_sequence
        self.next_sequence += 1
        self.ready.append(stored)

    def unlock(self, stored: _Stored, *, failed: bool) -> _Stored | None:
        """Put a locked message back; the message when its delivery count is spent."""
        del self.locked[stored.lock_token]  # type: ignore[arg-type]
        stored.lock_token = None
        if failed:
            stored.delivery_count += 1
            if stored.delivery_count >= self.max_delivery_count:
                return stored
        self.ready.append(stored)
        self.ready.sort(key=lambda s: s.sequence_number)
        return None


class _Handler(MessagingHandler):
    """Runs in the reactor thread; every method touching queues holds the fake's lock."""

    def __init__(self, fake: ServiceBusFake) -> None:
        super().__init__(prefetch=100, auto_accept=False, auto_settle=False)
        self.fake = fake
        self.consumers: dict[str, list[Any]] = {}
        self.replies: dict[tuple[Any, str], Any] = {}

    # --- lifecycle

    def on_start(self, event: Any) -> None:
        self.fake._acceptor = event.container.listen(f"127.0.0.1:{self.fake.port}")
        event.container.schedule(_TICK, self)
        self.fake._started.set()

    def on_timer_task(self, event: Any) -> None:
        with self.fake._lock:
            now = time.time()
            for queue in list(self.fake._queues.values()):
                for stored in [s for s in queue.locked.values() if s.locked_until <= now]:
                    spent = queue.unlock(stored, failed=True)
                    if spent is not None:
                        self._max_delivery_exceeded(queue, spent)
            self._dispatch_all()
        event.container.schedule(_TICK, self)

    def on_stop_fake(self, event: Any) -> None:
        self.fake._acceptor.close()
        for connection in list(self.fake._connections):
            connection.close()
        self.fake._injector.close()
        self.fake._container.stop()

    def on_drop_connections(self, event: Any) -> None:
        for connection in list(self.fake._connections):
            # With an info map, as Service Bus sends (the SDK reads all three error fields).
            info = {symbol("com.microsoft:tracking-id"): str(uuid.uuid4())}
            connection.condition = Condition("amqp:connection:forced", "dropped", info)
            connection.close()
        self.fake._dropped.set()

    def on_connection_opening(self, event: Any) -> None:
        self.fake._connections.add(event.connection)

    def on_connection_closed(self, event: Any) -> None:
        self.fake._connections.discard(event.connection)

    def on_disconnected(self, event: Any) -> None:
        self.fake._connections.discard(event.connection)
        self._forget_links(event.connection)

    # --- links

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_sender:  # the client receives: a queue, or the reply side of a node
            address = link.remote_source.address or ""
            link.source.address = address
            link.target.copy(link.remote_target)
            link.snd_settle_mode = Link.SND_UNSETTLED
            link.rcv_settle_mode = link.remote_rcv_settle_mode
            entity = _entity(address)
            if entity == "$cbs" or entity.endswith(_MANAGEMENT):
                self.replies[(link.connection, entity)] = link
            else:
                self.consumers.setdefault(entity, []).append(link)
        else:
            link.target.address = link.remote_target.address
            link.source.copy(link.remote_source)
            link.max_message_size = MAX_MESSAGE_SIZE  # announced in attach, as Service Bus does

    def on_link_closing(self, event: Any) -> None:
        self._drop_link(event.link)

    def _drop_link(self, link: Any) -> None:
        for links in self.consumers.values():
            if link in links:
                links.remove(link)
        for key, reply in list(self.replies.items()):
            if reply is link:
                del self.replies[key]

    def _forget_links(self, connection: Any) -> None:
        for links in self.consumers.values():
            links[:] = [link for link in links if link.connection != connection]
        for key in [k for k in self.replies if k[0] == connection]:
            del self.replies[key]

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if not link.is_sender:
            return
        with self.fake._lock:
            entity = _entity(link.source.address or "")
            queue = self.fake._queues.get(entity)
            if queue is not None:
                self._dispatch(queue, [link])
            if link.drain_mode:
                link.drained()

    # --- incoming messages: to a queue, to $cbs, to $management

    def on_message(self, event: Any) -> None:
        if event.connection.state & Endpoint.LOCAL_CLOSED:
            return  # sent after this side closed the connection: never applied, never answered
        entity = _entity(event.link.target.address or event.link.remote_target.address or "")
        message = event.message
        with self.fake._lock:
            if entity == "$cbs":
                self._reply(event, message, 202, "Accepted", status_field="status-code")
            elif entity.endswith(_MANAGEMENT):
                queue = self.fake._queue(entity.removesuffix(_MANAGEMENT))
                self._management(event, queue, message)
            elif (size := len(message.encode())) > MAX_MESSAGE_SIZE:
                delivery = event.delivery
                delivery.local.condition = Condition(
                    "amqp:link:message-size-exceeded",
                    f"The received message (size {size} bytes) exceeds the limit "
                    f"({MAX_MESSAGE_SIZE} bytes) currently allowed on the link.",
                    {symbol("com.microsoft:tracking-id"): str(uuid.uuid4())},
                )
                delivery.update(Delivery.REJECTED)
                delivery.settle()
                return
            else:
                self._enqueue(self.fake._queue(entity), message)
                self._dispatch_all()
        self.accept(event.delivery)

    def _enqueue(self, queue: _Queue, message: Message) -> None:
        now = time.time()
        annotations: dict[Any, Any] = message.annotations or {}
        scheduled = annotations.get(symbol("x-opt-scheduled-enqueue-time"))
        visible = max(now, scheduled / 1000) if scheduled is not None else now
        queue.add(_Stored(message, 0, now, visible))

    def _reply(
        self,
        event: Any,
        request: Message,
        status: int,
        description: str,
        *,
        body: Any = None,
        condition: str = "",
        status_field: str = "statusCode",
    ) -> None:
        entity = _entity(event.link.target.address or "")
        link = self.replies.get((event.connection, entity))
        if link is None:
            return
        properties: dict[Any, Any] = {
            status_field: status,
            status_field.replace("Code", "Description").replace("code", "description"): description,
        }
        if condition:
            properties["errorCondition"] = symbol(condition)
        reply = Message(body=body, correlation_id=request.id, properties=properties)
        link.send(reply, tag=uuid.uuid4().bytes)

    def _management(self, event: Any, queue: _Queue, request: Message) -> None:
        properties: dict[Any, Any] = request.properties or {}
        operation = properties.get("operation")
        body: dict[Any, Any] = request.body if isinstance(request.body, dict) else {}
        now = time.time()
        if operation == "com.microsoft:renew-lock":
            expirations = []
            for token in body.get("lock-tokens", []):
                stored = queue.locked.get(token)
                if stored is None or stored.locked_until <= now:
                    self._reply(event, request, 410, "The lock was lost.", condition=_LOCK_LOST)
                    return
                stored.locked_until = now + queue.lock_duration
                expirations.append(_ms(stored.locked_until))
            array = Array(UNDESCRIBED, Data.TIMESTAMP, *expirations)  # type: ignore[arg-type]
            self._reply(event, request, 200, "OK", body={"expirations": array})
        elif operation == "com.microsoft:update-disposition":
            outcome = {"completed": "complete", "abandoned": "abandon", "suspended": "dead"}
            action = outcome.get(str(body.get("disposition-status", "")))
            if action is None:
                self._reply(event, request, 400, "Unsupported disposition-status.")
                return
            for token in body.get("lock-tokens", []):
                reason = str(body.get("deadletter-reason", ""))
                detail = str(body.get("deadletter-description", ""))
                if not self._settle(queue, token, action, reason, detail):
                    self._reply(event, request, 410, "The lock was lost.", condition=_LOCK_LOST)
                    return
            self._reply(event, request, 200, "OK", body={})
        elif operation == "com.microsoft:peek-message":
            start = int(body.get("from-sequence-number", 0))
            count = int(body.get("message-count", 1))
            everything = [*queue.ready, *queue.locked.values()]
            everything.sort(key=lambda s: s.sequence_number)
            chosen = [s for s in everything if s.sequence_number >= start][:count]
            if not chosen:
                self._reply(event, request, 204, "No messages.", body={})
                return
            messages = [{"message": self._outgoing(queue, s, now).encode()} for s in chosen]
            self._reply(event, request, 200, "OK", body={"messages": messages})
        else:
            self._reply(event, request, 501, f"{operation} is not implemented by the fake.")

    # --- deliveries to receivers, and their settlement

    def _dispatch_all(self) -> None:
        for entity, links in self.consumers.items():
            queue = self.fake._queues.get(entity)
            if queue is not None and links:
                self._dispatch(queue, links)

    def _dispatch(self, queue: _Queue, links: list[Any]) -> None:
        now = time.time()
        for link in links:
            if not (link.state & Endpoint.LOCAL_ACTIVE and link.state & Endpoint.REMOTE_ACTIVE):
                continue
            while link.credit > 0:
                stored = next((s for s in queue.ready if s.visible_at <= now), None)
                if stored is None:
                    break
                queue.ready.remove(stored)
                stored.lock_token = uuid.uuid4()
                stored.locked_until = now + queue.lock_duration
                queue.locked[stored.lock_token] = stored
                delivery = link.send(
                    self._outgoing(queue, stored, now), tag=stored.lock_token.bytes_le
                )
                # Kept on the delivery: Proton reads tags back as UTF-8 text, and these are not.
                delivery.lock = (queue.name, stored.lock_token)

    def _outgoing(self, queue: _Queue, stored: _Stored, now: float) -> Message:
        message = Message()
        message.decode(stored.message.encode())
        annotations = dict(message.annotations or {})
        annotations.update(
            {
                symbol("x-opt-enqueued-time"): _ms(stored.enqueued_at),
                symbol("x-opt-sequence-number"): stored.sequence_number,
            }
        )
        if stored.lock_token is not None:
            annotations[symbol("x-opt-lock-token")] = stored.lock_token
            annotations[symbol("x-opt-locked-until")] = _ms(stored.locked_until)
        message.annotations = annotations
        message.delivery_count = stored.delivery_count
        message.first_acquirer = stored.delivery_count == 0
        return message

    def on_accepted(self, event: Any) -> None:
        self._settled(event, "complete", Delivery.ACCEPTED)

    def on_rejected(self, event: Any) -> None:
        condition = event.delivery.remote.condition
        if condition is None or condition.name != _DEAD_LETTER:
            self._settled(event, "abandon", Delivery.REJECTED)
            return
        info = condition.info or {}
        reason = str(info.get("DeadLetterReason") or "")
        detail = str(info.get("DeadLetterErrorDescription") or condition.description or "")
        self._settled(event, "dead", Delivery.REJECTED, reason, detail)

    def on_released(self, event: Any) -> None:
        delivery = event.delivery
        if delivery.remote_state == Delivery.MODIFIED:
            if delivery.remote.undeliverable:  # a deferral: not reproduced
                self._answer(delivery, Delivery.REJECTED, "amqp:not-implemented")
                return
            self._settled(event, "abandon", Delivery.MODIFIED)
        else:
            self._settled(event, "release", Delivery.RELEASED)

    def _settled(
        self, event: Any, action: str, state: int, reason: str = "", detail: str = ""
    ) -> None:
        delivery = event.delivery
        if delivery.settled and delivery.local_state:
            return  # answered already
        entity, token = delivery.lock
        with self.fake._lock:
            ok = self._settle(self.fake._queue(entity), token, action, reason, detail)
        self._answer(delivery, state if ok else Delivery.REJECTED, "" if ok else _LOCK_LOST)

    @staticmethod
    def _answer(delivery: Any, state: int, condition: str) -> None:
        if delivery.settled and not delivery.remote_state:
            return
        if condition:
            delivery.local.condition = Condition(condition, "The lock was lost or is unknown.")
        delivery.update(state)
        delivery.settle()

    def _settle(self, queue: _Queue, token: Any, action: str, reason: str, detail: str) -> bool:
        """Apply a settlement to the message locked by ``token``; ``False`` if the lock is lost."""
        token = token if isinstance(token, uuid.UUID) else uuid.UUID(str(token))
        stored = queue.locked.get(token)
        if stored is None or stored.locked_until <= time.time():
            return False
        if action == "complete":
            del queue.locked[token]
        elif action == "dead":
            del queue.locked[token]
            self._dead_letter(queue, stored, reason, detail)
        else:
            spent = queue.unlock(stored, failed=action == "abandon")
            if spent is not None:
                self._max_delivery_exceeded(queue, spent)
        self._dispatch_all()
        return True

    def _max_delivery_exceeded(self, queue: _Queue, stored: _Stored) -> None:
        detail = (
            f"Message could not be consumed after {queue.max_delivery_count} delivery attempts."
        )
        self._dead_letter(queue, stored, "MaxDeliveryCountExceeded", detail)

    def _dead_letter(self, queue: _Queue, stored: _Stored, reason: str, detail: str) -> None:
        message: Any = Message()
        message.decode(stored.message.encode())
        properties: dict[Any, Any] = dict(message.properties or {})
        properties["DeadLetterReason"] = reason
        properties["DeadLetterErrorDescription"] = detail
        message.properties = properties
        dead = self.fake._queue(queue.name + _DLQ)
        dead.add(
            _Stored(
                message,
                0,
                stored.enqueued_at,
                time.time(),
                delivery_count=stored.delivery_count,
            )
        )


def _entity(address: str) -> str:
    """The entity an address names, lowercased (``amqps://host/q`` -> ``q``)."""
    path = urlsplit(address).path if "://" in address else address
    return path.strip("/").lower()


class ServiceBusFake:
    """A Service Bus namespace on ``127.0.0.1``, run in a background thread.

    Args:
        port: The TCP port (``0``: a free one).
        lock_duration: Seconds a delivery locks its message, for queues made on first use.
        max_delivery_count: Failed deliveries before a message is dead-lettered, likewise.
    """

    def __init__(
        self, port: int = 0, *, lock_duration: float = 60.0, max_delivery_count: int = 10
    ) -> None:
        if port == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self.port = port
        self.lock_duration = lock_duration
        self.max_delivery_count = max_delivery_count
        self._lock = threading.RLock()
        self._queues: dict[str, _Queue] = {}
        self._connections: set[Any] = set()
        self._started = threading.Event()
        self._dropped = threading.Event()
        self._acceptor: Any = None
        self._injector = EventInjector()
        self._container: Any = None
        self._thread: threading.Thread | None = None

    @property
    def connection_string(self) -> str:
        """A connection string the SDK accepts: plain AMQP to this server (no TLS)."""
        return (
            f"Endpoint=sb://127.0.0.1:{self.port};SharedAccessKeyName=fake;"
            "SharedAccessKey=ZmFrZQ==;UseDevelopmentEmulator=true"
        )

    def create_queue(
        self,
        name: str,
        *,
        lock_duration: float | None = None,
        max_delivery_count: int | None = None,
    ) -> None:
        """Create (or reconfigure) a queue, as Service Bus's management API would."""
        with self._lock:
            queue = self._queue(name.lower())
            if lock_duration is not None:
                queue.lock_duration = lock_duration
            if max_delivery_count is not None:
                queue.max_delivery_count = max_delivery_count

    def _queue(self, entity: str) -> _Queue:
        queue = self._queues.get(entity)
        if queue is None:
            queue = _Queue(entity, self.lock_duration, self.max_delivery_count)
            self._queues[entity] = queue
        return queue

    def counts(self, name: str) -> tuple[int, int]:
        """How many messages of queue ``name`` are ready and locked."""
        with self._lock:
            queue = self._queue(name.lower())
            return len(queue.ready), len(queue.locked)

    def start(self) -> ServiceBusFake:
        """Listen, in a daemon thread; returns once the port accepts connections."""
        container = self._container = Container(_Handler(self))
        container.selectable(self._injector)
        self._thread = threading.Thread(target=container.run, name="servicebus-fake", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the Service Bus fake did not start")
        return self

    def stop(self) -> None:
        """Close every connection and stop listening."""
        if self._thread is None:
            return
        self._injector.trigger(ApplicationEvent("stop_fake"))
        self._thread.join(10)
        self._thread = None

    def drop_connections(self) -> None:
        """Close every client connection (``amqp:connection:forced``), keeping the queues."""
        self._dropped.clear()
        self._injector.trigger(ApplicationEvent("drop_connections"))
        if not self._dropped.wait(10):
            raise RuntimeError("the Service Bus fake did not drop its connections")

    def __enter__(self) -> ServiceBusFake:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
