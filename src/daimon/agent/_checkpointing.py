"""Saving a run's state to a Checkpoint after each step, and picking a run up from it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daimon.core._run_hold import RunHold
from daimon.core.checkpoints import CheckpointState, RunProgress
from daimon.core.errors import CheckpointCorruptError
from daimon.core.messages import ToolCall
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.state import RunState

if TYPE_CHECKING:
    from daimon.core.protocols import Checkpoint

__all__ = ("Restored", "RunCheckpointer", "snapshot")


_LEGACY_KEY = "daimon"
"""Where checkpoints written before ``CheckpointState.progress`` kept the loop's bookkeeping."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What a run needs to continue from its checkpoint."""

    finished: AgentResponse | None
    """The run's response, when the checkpoint says it already finished."""
    pending: tuple[ToolCall, ...]
    completed: dict[str, ToolOutput]
    progress: RunProgress


def snapshot(
    state: RunState,
    pending: Sequence[ToolCall],
    completed: Mapping[str, ToolOutput],
    progress: RunProgress,
    custom: dict[str, Any] | None = None,
) -> CheckpointState:
    """The run as a CheckpointState: what a checkpoint stores and a paused run hands back."""
    extra: dict[str, Any] = {}
    if custom is not None:
        extra["custom"] = custom
    if state.effects:
        extra["effects"] = dict(state.effects)
    return CheckpointState(
        run_id=state.run_id,
        messages=tuple(state.messages),
        iteration=state.iteration,
        usage=state.usage,
        cost=state.cost,
        pending_tool_calls=tuple(pending),
        completed_tool_results=dict(completed),
        session_id=state.session_id,
        progress=progress,
        **extra,
    )


class RunCheckpointer:
    """Writes one run's snapshots to its agent's checkpoint store, one at a time.

    With a store that leases runs (:class:`~daimon.core.RunLeases`), it holds the run's lease from
    before the run is loaded until :meth:`end_lease`, renewing it every third of its length.
    """

    __slots__ = ("_checkpoint", "_hold", "_lock", "_state")

    def __init__(self, checkpoint: Checkpoint | None, state: RunState) -> None:
        self._checkpoint = checkpoint
        self._state = state
        self._lock: asyncio.Lock | None = None  # made on the first write: most runs never write
        self._hold = RunHold(checkpoint)

    def hold(self) -> None:
        """Mark the run as in progress in this process until :meth:`release`.

        Raises:
            CheckpointConflictError: This process already runs it with the same store.
        """
        self._hold.hold(self._state.run_id)

    def release(self) -> None:
        """End what :meth:`hold` started (safe to call when it did not).

        A lease :meth:`end_lease` did not give up is no longer renewed: it expires by itself.
        """
        self._hold.release()

    def check_lease(self) -> None:
        """Refuse to start tool calls once the run's lease may have ended (see RunHold.check).

        Raises:
            CheckpointConflictError: The lease ended: another process may be running the run.
        """
        self._hold.check()

    async def end_lease(self) -> None:
        """Stop renewing the run's lease and give it up (safe to call when none is held).

        A store that fails to release it is logged, not raised: the lease then expires by itself.
        """
        await self._hold.end()

    async def restore(self, saved: CheckpointState | None = None) -> Restored | None:
        """Put the run's saved state into the run state, and claim the run if it goes on.

        With a store, the run's lease is taken first (when the store leases runs), then the
        store's newest checkpoint of the run wins over a ``saved`` state handed in (a paused
        response kept by the caller may be older than what the run did since). A run that goes
        on is claimed too: its state is saved again, a compare-and-set, so of two processes
        resuming one run only one gets past this point, before any tool runs.
        ``None`` when there is nothing to resume: a new run.

        Raises:
            RunLeasedError: Another process holds the run's lease: it is running the run.
            CheckpointConflictError: Another process claimed or continued the run first.
            CheckpointCorruptError: The state holds no agent run's progress.
        """
        state = self._state
        if self._checkpoint is not None:
            run_id = saved.run_id if saved else state.run_id
            await self._hold.take(run_id)
            stored = await self._checkpoint.load(run_id)
            saved = stored or saved
        if saved is None:
            return None
        progress = _progress_of(saved)
        state.run_id = saved.run_id
        state.messages[:] = saved.messages
        state.iteration = saved.iteration
        state.usage = saved.usage
        state.cost = saved.cost
        state.effects = saved.effects
        if state.session_id is None:
            state.session_id = saved.session_id
        finished = None
        if progress.status == "completed":
            finished = AgentResponse(
                text=progress.text or "",
                messages=tuple(saved.messages[progress.new_start :]),
                iterations=saved.iteration,
                usage=saved.usage,
                cost=saved.cost,
                run_id=saved.run_id,
                session_id=saved.session_id,
            )
        elif self._checkpoint is not None:
            await self._write(saved)
        return Restored(
            finished=finished,
            pending=saved.pending_tool_calls,
            completed=dict(saved.completed_tool_results),
            progress=progress,
        )

    async def save(
        self,
        pending: Sequence[ToolCall],
        completed: Mapping[str, ToolOutput],
        progress: RunProgress,
    ) -> None:
        """Store a snapshot of the run in progress (when there is a store)."""
        if self._checkpoint is not None:
            await self._write(snapshot(self._state, pending, completed, progress))

    async def _write(self, saved: CheckpointState) -> None:
        assert self._checkpoint is not None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._checkpoint.save(saved)


def _progress_of(saved: CheckpointState) -> RunProgress:
    """The run's progress, checked against its messages (also from records of older daimons)."""
    progress = saved.progress
    problem = None
    if progress is None:
        progress, problem = _legacy_progress(saved.custom.get(_LEGACY_KEY))
    if progress is not None:
        if not 0 <= progress.new_start <= len(saved.messages):
            problem = f"bad new_start {progress.new_start!r}"
        elif not 0 <= progress.memory_mark <= len(saved.messages):
            problem = f"bad memory_mark {progress.memory_mark!r}"
        elif progress.status == "completed" and progress.text is None:
            problem = "a completed run without its answer"
    if progress is None or problem is not None:
        raise CheckpointCorruptError(
            f"checkpoint of run {saved.run_id!r} is not a daimon run state: {problem}"
        )
    return progress


def _legacy_progress(info: Any) -> tuple[RunProgress | None, str | None]:
    """The progress that checkpoints written before ``progress`` kept in ``custom``."""
    if not isinstance(info, dict):
        return None, f"no run progress (and no {_LEGACY_KEY!r} entry)"
    status, text = info.get("status"), info.get("text")
    new_start, mark = info.get("new_start"), info.get("memory_mark")
    attempts = info.get("output_attempts", 0)
    if status not in ("running", "completed"):
        return None, f"unknown status {status!r}"
    if not isinstance(new_start, int):
        return None, f"bad new_start {new_start!r}"
    if not isinstance(mark, int):
        return None, f"bad memory_mark {mark!r}"
    if not isinstance(attempts, int) or not (text is None or isinstance(text, str)):
        return None, "bad output_attempts or text"
    progress = RunProgress(
        status="completed" if status == "completed" else "running",
        new_start=new_start,
        memory_mark=mark,
        output_attempts=attempts,
        text=text,
    )
    return progress, None
