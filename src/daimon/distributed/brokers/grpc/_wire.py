"""The broker service's wire format: one JSON body per call, in daimon's versioned envelope.

No protobuf: every method is unary-unary and carries ``daimon.core.codec`` JSON, so the
service needs no generated code and a body can be read with any gRPC tool. Methods are
``/daimon.broker.v1.Broker/<Name>``; an error comes back as a gRPC status code with the daimon
exception's type name in the trailing metadata key ``daimon-error``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from daimon.core.results import ApprovalDecision
from daimon.core.tasks import AgentTask, DeadLetter, TaskPause, TaskResult, TaskStatus

__all__ = (
    "ClaimReply",
    "ClaimRequest",
    "DeadLettersReply",
    "DeadLettersRequest",
    "DecideRequest",
    "ERROR_KEY",
    "HeartbeatRequest",
    "MAX_MESSAGE",
    "Reply",
    "SERVICE",
    "SettleRequest",
    "StatusReply",
    "SubmitRequest",
    "TaskRef",
    "path",
)

SERVICE = "daimon.broker.v1.Broker"
ERROR_KEY = "daimon-error"
MAX_MESSAGE = 64 * 1024 * 1024
"""The largest body either side sends or takes (gRPC's default is 4 MiB): a task with its input."""


def path(method: str) -> str:
    """The full gRPC method path of one of the service's methods."""
    return f"/{SERVICE}/{method}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitRequest:
    queue: str
    task: AgentTask
    kind: Literal["grpc_submit"] = field(default="grpc_submit", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRef:
    """A task of a queue (for ``Status`` and ``Cancel``)."""

    queue: str
    task_id: str
    kind: Literal["grpc_task_ref"] = field(default="grpc_task_ref", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRequest:
    queue: str
    wait: float
    lease: float
    max_deliver: int
    kind: Literal["grpc_claim"] = field(default="grpc_claim", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimReply:
    """The claimed task with its attempt number, or none within the wait."""

    task: AgentTask | None = None
    kind: Literal["grpc_claim_reply"] = field(default="grpc_claim_reply", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequest:
    queue: str
    task_id: str
    attempt: int
    lease: float
    kind: Literal["grpc_heartbeat"] = field(default="grpc_heartbeat", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class SettleRequest:
    queue: str
    task_id: str
    attempt: int
    action: Literal["complete", "pause", "fail", "retry", "release"]
    max_deliver: int
    result: TaskResult | None = None
    error: str = ""
    delay: float = 0.0
    paused: TaskPause | None = None
    kind: Literal["grpc_settle"] = field(default="grpc_settle", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DecideRequest:
    """Decisions for a paused task of a queue (``Decide``): it is queued again to resume."""

    queue: str
    task_id: str
    decisions: dict[str, ApprovalDecision]
    kind: Literal["grpc_decide"] = field(default="grpc_decide", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """A one-word outcome (``ok``, ``requeued``, ``stale``, ...) or a flag."""

    outcome: str = ""
    flag: bool = False
    kind: Literal["grpc_reply"] = field(default="grpc_reply", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusReply:
    status: TaskStatus
    kind: Literal["grpc_status_reply"] = field(default="grpc_status_reply", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLettersRequest:
    """The oldest ``limit`` dead letters of a queue (``DeadLetters``; an inspection)."""

    queue: str
    limit: int
    kind: Literal["grpc_dead_letters"] = field(default="grpc_dead_letters", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLettersReply:
    letters: list[DeadLetter]
    kind: Literal["grpc_dead_letters_reply"] = field(
        default="grpc_dead_letters_reply", init=False, repr=False
    )
