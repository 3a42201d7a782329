"""The state a checkpoint stores so a run can resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from daimon.core._added import ADDED
from daimon.core._fastinit import fast_init
from daimon.core.chat import Usage
from daimon.core.messages import Message, ToolCall
from daimon.core.tools import ToolOutput

__all__ = (
    "CheckpointState",
    "Effect",
    "EffectRecord",
    "EffectStatus",
    "Lease",
    "RunLeases",
    "RunProgress",
)

Effect = Literal["repeatable", "keyed", "once", "ask"]
"""What a tool's call does when it is in doubt: it started and its process stopped before its
result was recorded, so whether its effect happened is unknown.

* ``repeatable`` (the default): run it again. For reads and calls that are safe to repeat.
* ``keyed``: run it again with the same ``ctx.idempotency_key``, for a service that applies
  each key's effect once.
* ``once``: never run it again; the model is told the outcome is unknown.
* ``ask``: never run it again by itself; the run pauses for a person to approve running it again
  or to reject it.
"""

EFFECTS: tuple[Effect, ...] = ("repeatable", "keyed", "once", "ask")
"""Every :data:`Effect`, the default first."""

EffectStatus = Literal["started", "completed", "in_doubt", "skipped"]
"""Where a call stands in its run's effect ledger: ``started`` (its intent is recorded, it runs),
``completed`` (its result is recorded: it never runs again), ``in_doubt`` (it started, its
result was never recorded, and its tool may not run again: ``once``, or ``ask`` awaiting a
person), ``skipped`` (in doubt, and a person decided not to run it again)."""


def idempotency_key(run_id: str, call_id: str) -> str:
    """``run_id:call_id``: a call's key, the same on every attempt of it."""
    return f"{run_id}:{call_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectRecord:
    """One tool call in its run's effect ledger, written before the call runs."""

    call_id: str
    tool: str
    effect: Effect
    status: EffectStatus
    arguments_sha256: str
    """Digest of the call's arguments (JSON text as the model sent it)."""
    idempotency_key: str
    """``ctx.idempotency_key`` of the call: the same on every attempt."""
    attempts: int = 1
    """How many times the call started (a ``repeatable`` or ``keyed`` call in doubt runs again)."""
    kind: Literal["effect_record"] = field(default="effect_record", init=False, repr=False)


@fast_init  # hot: two per run (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunProgress:
    """Where an agent run stands in its own messages: the loop's bookkeeping in a checkpoint."""

    status: Literal["running", "completed"] = "running"
    """``completed`` once the run has its answer: resuming it returns that answer again."""
    new_start: int = 0
    """Index of the run's first own message (after system prompt, examples and history)."""
    memory_mark: int = 0
    """Index of the first message not yet written to the session's memory."""
    output_attempts: int = 0
    """Structured-output answers refused so far."""
    text: str | None = None
    """The answer of a completed run."""
    kind: Literal["run_progress"] = field(default="run_progress", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointState:
    """A snapshot of a run, taken after each model response and each tool result."""

    run_id: str
    messages: tuple[Message, ...] = ()
    iteration: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    pending_tool_calls: tuple[ToolCall, ...] = ()
    """Calls the model asked for that have no result yet."""
    completed_tool_results: dict[str, ToolOutput] = field(default_factory=dict[str, ToolOutput])
    """Results by call id, so a resumed run never runs a finished call twice."""
    custom: dict[str, Any] = field(default_factory=dict[str, Any])
    """Anything else the caller wants kept (JSON values only)."""
    session_id: str | None = None
    progress: RunProgress | None = None
    """An agent run's own bookkeeping (``None`` in states that flows and callers write)."""
    effects: dict[str, EffectRecord] = field(
        default_factory=dict[str, EffectRecord], metadata=ADDED
    )
    """The run's effect ledger: the calls of tools that declare an effect, by call id."""
    kind: Literal["checkpoint_state"] = field(default="checkpoint_state", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """The right to run one run: held by one process at a time, renewed while it runs."""

    run_id: str
    owner: str
    """Who holds it: ``host:pid`` of the holding process."""
    token: int
    """The lease's generation in the run: each new holder's is higher (fencing)."""
    expires_at: int
    """When it ends unless renewed, in milliseconds since the epoch by the store's clock."""


@runtime_checkable
class RunLeases(Protocol):
    """A checkpoint store that leases runs, so one run has one live runner across processes.

    The agent acquires a run's lease before it loads the run, renews it every third of
    ``lease`` seconds while the run goes on, and releases it when the run ends. A holder whose
    lease ended (expired, or taken over after it expired) can no longer save the run.
    """

    @property
    def lease(self) -> float:
        """Seconds a lease lasts unless renewed."""
        ...

    async def acquire(self, run_id: str) -> Lease:
        """Take the run's lease.

        Raises:
            RunLeasedError: another holder's lease is live.
        """
        ...

    async def renew(self, lease: Lease) -> Lease:
        """Extend ``lease`` by ``lease`` seconds from now.

        Raises:
            CheckpointConflictError: the lease ended: it expired or another holder took it.
        """
        ...

    async def release(self, lease: Lease) -> None:
        """Give the lease up (nothing happens if it already ended)."""
        ...
