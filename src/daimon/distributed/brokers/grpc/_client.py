"""The client: a :class:`~daimon.distributed.Broker` handle on a daimon broker service."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from daimon.core.codec import dumps, loads
from daimon.core.errors import BrokerError, BuilderError, DaimonError, SerializationError
from daimon.core.optional import require
from daimon.core.results import ApprovalDecision
from daimon.core.tasks import AgentTask, DeadLetter, TaskPause, TaskResult, TaskStatus
from daimon.distributed.brokers.grpc._wire import (
    ERROR_KEY,
    MAX_MESSAGE,
    ClaimReply,
    ClaimRequest,
    DeadLettersReply,
    DeadLettersRequest,
    DecideRequest,
    HeartbeatRequest,
    Reply,
    SettleRequest,
    StatusReply,
    SubmitRequest,
    TaskRef,
    path,
)
from daimon.kit.task_records import (
    SettleByTaskId,
    SettlingDelivery,
    as_decisions,
    check_dead_letter_limit,
    check_options,
)

grpc = require("grpc", extra="grpc")

__all__ = ("GrpcBroker", "GrpcBrokerError")

R = TypeVar("R")

# Reconnect quickly after the service restarts (gRPC's default backoff grows to two minutes),
# and give each handle connections of its own: from gRPC's process-wide pool, a handle opened
# after an outage inherited another handle's reconnect backoff (up to 1.2 s) and its first call
# ran out of a short timeout although the service was back.
_CHANNEL_OPTIONS = (
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
)
_RETRYABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED"})


class GrpcBrokerError(BrokerError):
    """The broker service failed, refused a call, or could not be reached.

    Attributes:
        code: The gRPC status code's name (``UNAVAILABLE``, ``UNAUTHENTICATED``, ...).
        retryable: Whether the same call may succeed later (the service was down or busy).
    """

    def __init__(self, message: str, *, code: str, task_id: str | None = None) -> None:
        super().__init__(message, task_id=task_id)
        self.code = code
        self.retryable = code in _RETRYABLE


class GrpcBroker(SettleByTaskId):
    """Queues tasks on a daimon broker service (:class:`GrpcBrokerServer`) over gRPC.

    Every call waits for the service to be reachable, up to ``timeout`` seconds, so a handle
    rides out a restart of the service; then it raises :class:`GrpcBrokerError` (a
    :class:`~daimon.core.errors.BrokerError`).

    Args:
        target: The service's ``host:port``.
        queue: The queue's name: tasks of different queues never meet.
        lease: Seconds a delivery stays leased without a heartbeat.
        max_deliver: Attempts a task gets before it is dead-lettered.
        token: Bearer token the service asks for.
        tls: Use TLS (the system's root certificates).
        timeout: Seconds a call may take, beyond a claim's wait.
    """

    _service_errors = (grpc.aio.AioRpcError,)

    def __init__(
        self,
        target: str,
        *,
        queue: str = "tasks",
        lease: float = 30.0,
        max_deliver: int = 5,
        token: str | None = None,
        tls: bool = False,
        timeout: float = 30.0,
    ) -> None:
        check_options(lease, max_deliver)
        if not target:
            raise BuilderError("the broker service's address (host:port) must not be empty")
        if not queue:
            raise BuilderError("queue must not be empty")
        if not timeout > 0:
            raise BuilderError(f"timeout must be positive, got {timeout!r}")
        self._target = target
        self._queue = queue
        self._lease = float(lease)
        self._max_deliver = max_deliver
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._tls = tls
        self._timeout = float(timeout)
        self._channel: Any = None
        self._closed = False
        self._held: dict[str, _GrpcDelivery] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> GrpcBroker:
        """A handle for ``grpc://host:port?queue=...`` (``grpcs://``: with TLS)."""
        parts = urlsplit(url)
        if parts.scheme not in ("grpc", "grpcs") or not parts.netloc:
            raise BuilderError(f"not a gRPC broker URL (grpc://host:port): {url!r}")
        query: dict[str, Any] = dict(parse_qsl(parts.query))
        for name in ("lease", "timeout"):
            if name in query:
                query[name] = float(query[name])
        if "max_deliver" in query:
            query["max_deliver"] = int(query["max_deliver"])
        return cls(parts.netloc, tls=parts.scheme == "grpcs", **{**query, **options})

    async def aclose(self) -> None:
        """Close the channel; safe to call again. Deliveries held come back after their lease."""
        if self._closed:
            return
        self._closed = True
        if self._channel is not None:
            await self._channel.close()

    def _open(self) -> Any:
        if self._closed:
            raise DaimonError("the broker handle is closed")
        if self._channel is None:
            if self._tls:
                credentials = grpc.ssl_channel_credentials()
                self._channel = grpc.aio.secure_channel(
                    self._target, credentials, options=_CHANNEL_OPTIONS
                )
            else:
                self._channel = grpc.aio.insecure_channel(self._target, options=_CHANNEL_OPTIONS)
        return self._channel

    async def _call(self, method: str, request: Any, reply: type[R], *, wait: float = 0.0) -> R:
        body = dumps(request).encode("utf-8")  # refuses what cannot be carried, before sending
        call = self._open().unary_unary(path(method))
        data = await call(
            body, timeout=self._timeout + wait, metadata=self._metadata, wait_for_ready=True
        )
        return loads(data, reply)

    def _service_error(self, operation: str, task_id: str | None, exc: BaseException) -> Exception:
        return _error(exc, self._target, task_id)

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task`` (once the service has it on disk); a known task id is not queued again."""
        await self._call("Submit", SubmitRequest(queue=self._queue, task=task), Reply)
        return task.task_id

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when it is unknown."""
        ref = TaskRef(queue=self._queue, task_id=task_id)
        return (await self._call("Status", ref, StatusReply)).status

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; whether it was cancelled."""
        ref = TaskRef(queue=self._queue, task_id=task_id)
        return (await self._call("Cancel", ref, Reply)).flag

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        """Send decisions for a paused task: it is queued again to resume; whether it was paused.

        The service does both in one transaction. Raises :class:`KeyError` for an unknown task.
        """
        request = DecideRequest(
            queue=self._queue, task_id=task_id, decisions=as_decisions(decisions)
        )
        return (await self._call("Decide", request, Reply)).flag

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks, from the service's store (none removed)."""
        request = DeadLettersRequest(queue=self._queue, limit=check_dead_letter_limit(limit))
        return (await self._call("DeadLetters", request, DeadLettersReply)).letters

    async def claim(self, wait: float = 1.0) -> _GrpcDelivery | None:
        """The next task, waiting up to ``wait`` seconds (on the service) for one."""
        wait = max(wait, 0.0)
        request = ClaimRequest(
            queue=self._queue, wait=wait, lease=self._lease, max_deliver=self._max_deliver
        )
        claimed = await self._call("Claim", request, ClaimReply, wait=wait)
        if claimed.task is None:
            return None
        return _GrpcDelivery(self, claimed.task)


class _GrpcDelivery(SettlingDelivery):
    __slots__ = ("_broker", "task")

    _service_errors = GrpcBroker._service_errors

    def __init__(self, broker: GrpcBroker, task: AgentTask) -> None:
        self._broker = broker
        self.task = task

    async def heartbeat(self) -> bool:
        broker = self._broker
        request = HeartbeatRequest(
            queue=broker._queue,
            task_id=self.task.task_id,
            attempt=self.task.attempt,
            lease=broker._lease,
        )
        return (await broker._call("Heartbeat", request, Reply)).outcome == "ok"

    async def _settle(
        self,
        action: str,
        *,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        paused: TaskPause | None = None,
    ) -> str:
        broker = self._broker
        request = SettleRequest(
            queue=broker._queue,
            task_id=self.task.task_id,
            attempt=self.task.attempt,
            action=action,  # type: ignore[arg-type]
            max_deliver=broker._max_deliver,
            result=result,
            error=error,
            delay=max(delay, 0.0),
            paused=paused,
        )
        return (await broker._call("Settle", request, Reply)).outcome

    def _service_error(self, operation: str, task_id: str | None, exc: BaseException) -> Exception:
        return _error(exc, self._broker._target, task_id)


def _error(exc: Any, target: str, task_id: str | None = None) -> Exception:
    """The daimon exception for a failed call: the one the service raised, where it says."""
    code = exc.code()
    name = dict(exc.trailing_metadata() or ()).get(ERROR_KEY, "")
    detail = exc.details() or ""
    if code == grpc.StatusCode.NOT_FOUND and name == "KeyError":
        return KeyError(detail)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return (SerializationError if name == "SerializationError" else BuilderError)(detail)
    return GrpcBrokerError(
        f"the broker service at {target} answered {code.name}: {detail}",
        code=code.name,
        task_id=task_id,
    )
