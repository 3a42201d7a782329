"""Saving a run's state to a Checkpoint after each step, and picking a run up from it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import CheckpointConflictError, CheckpointCorruptError
from daimon.core.messages import ToolCall
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.state import RunState

if TYPE_CHECKING:
    from daimon.core.protocols import Checkpoint

__all__ = ("Restored", "RunCheckpointer")

_KEY = "daimon"
"""The key of ``CheckpointState.custom`` that holds the loop's own bookkeeping."""

_IN_PROGRESS: set[tuple[int, str]] = set()
"""``(id(store), run_id)`` of every run this process is running with a checkpoint store.

Handles remember the checkpoint numbers they have seen, so two runs of one id through one handle
would each pass the other's compare-and-set: this set turns the second away before it starts.
"""


@dataclass(frozen=True, slots=True)
class Restored:
    """What a run needs to continue from its checkpoint."""

    finished: AgentResponse | None
    """The run's response, when the checkpoint says it already finished."""
    pending: tuple[ToolCall, ...]
    completed: dict[str, ToolOutput]
    new_start: int
    """Index of the run's first own message (after system, examples and history)."""
    memory_mark: int
    """Index of the first message not yet written to memory."""
    output_attempts: int
    """Structured-output answers already refused."""


class RunCheckpointer:
    """Snapshots one run; writes them, one at a time, when the agent has a checkpoint store."""

    __slots__ = ("_checkpoint", "_held", "_lock", "_state")

    def __init__(self, checkpoint: Checkpoint | None, state: RunState) -> None:
        self._checkpoint = checkpoint
        self._state = state
        self._lock: asyncio.Lock | None = None  # made on the first write: most runs never write
        self._held: tuple[int, str] | None = None

    def hold(self) -> None:
        """Mark the run as in progress in this process until :meth:`release`.

        Raises:
            CheckpointConflictError: This process already runs it with the same store.
        """
        key = (id(self._checkpoint), self._state.run_id)
        if key in _IN_PROGRESS:
            raise CheckpointConflictError(
                self._state.run_id,
                None,
                None,
                message=f"run {self._state.run_id!r} is already running in this process",
            )
        _IN_PROGRESS.add(key)
        self._held = key

    def release(self) -> None:
        """End what :meth:`hold` started (safe to call when it did not)."""
        if self._held is not None:
            _IN_PROGRESS.discard(self._held)
            self._held = None

    @property
    def enabled(self) -> bool:
        """Whether snapshots are written to a store."""
        return self._checkpoint is not None

    async def restore(self, saved: CheckpointState | None = None) -> Restored | None:
        """Put the run's saved state into the run state, and claim the run if it goes on.

        With a store, the store's newest checkpoint of the run wins over a ``saved`` state handed
        in (a paused response kept by the caller may be older than what the run did since).
        A run that goes on is claimed first: its state is saved again, a compare-and-set, so of
        two processes resuming one run only one gets past this point, before any tool runs.
        ``None`` when there is nothing to resume: a new run.

        Raises:
            CheckpointConflictError: Another process claimed or continued the run first.
        """
        state = self._state
        if self._checkpoint is not None:
            stored = await self._checkpoint.load(saved.run_id if saved else state.run_id)
            saved = stored or saved
        if saved is None:
            return None
        if saved.run_id != state.run_id:
            state.run_id = saved.run_id
        info = _bookkeeping(saved)
        state.messages[:] = saved.messages
        state.iteration = saved.iteration
        state.usage = saved.usage
        state.cost = saved.cost
        if state.session_id is None:
            state.session_id = saved.session_id
        new_start = info["new_start"]
        finished = None
        if info["status"] == "completed":
            finished = AgentResponse(
                text=info["text"],
                messages=tuple(saved.messages[new_start:]),
                iterations=saved.iteration,
                usage=saved.usage,
                cost=saved.cost,
                run_id=saved.run_id,
                session_id=saved.session_id,
            )
        elif self._checkpoint is not None:
            await self._write_state(saved)
        return Restored(
            finished=finished,
            pending=saved.pending_tool_calls,
            completed=dict(saved.completed_tool_results),
            new_start=new_start,
            memory_mark=info["memory_mark"],
            output_attempts=int(info.get("output_attempts", 0)),
        )

    def snapshot(
        self,
        pending: Sequence[ToolCall],
        completed: Mapping[str, ToolOutput],
        marks: Mapping[str, int],
    ) -> CheckpointState:
        """The run in progress as a CheckpointState (also what a paused run hands back)."""
        return self._state_of(pending, completed, {"status": "running", **marks})

    async def save(
        self,
        pending: Sequence[ToolCall],
        completed: Mapping[str, ToolOutput],
        marks: Mapping[str, int],
    ) -> None:
        """Store a snapshot of the run in progress (when there is a store)."""
        if self._checkpoint is not None:
            await self._write(pending, completed, {"status": "running", **marks})

    async def finish(self, response: AgentResponse, marks: Mapping[str, int]) -> None:
        """Record that the run finished, with its answer, so a repeat call returns it."""
        if self._checkpoint is not None:
            await self._write((), {}, {"status": "completed", **marks, "text": response.text})

    async def _write(
        self,
        pending: Sequence[ToolCall],
        completed: Mapping[str, ToolOutput],
        info: dict[str, Any],
    ) -> None:
        await self._write_state(self._state_of(pending, completed, info))

    async def _write_state(self, saved: CheckpointState) -> None:
        assert self._checkpoint is not None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._checkpoint.save(saved)

    def _state_of(
        self,
        pending: Sequence[ToolCall],
        completed: Mapping[str, ToolOutput],
        info: dict[str, Any],
    ) -> CheckpointState:
        state = self._state
        return CheckpointState(
            run_id=state.run_id,
            messages=tuple(state.messages),
            iteration=state.iteration,
            usage=state.usage,
            cost=state.cost,
            pending_tool_calls=tuple(pending),
            completed_tool_results=dict(completed),
            custom={_KEY: info},
            session_id=state.session_id,
        )


def _bookkeeping(saved: CheckpointState) -> dict[str, Any]:
    info = saved.custom.get(_KEY)
    problem = None
    if not isinstance(info, dict):
        problem = f"no {_KEY!r} entry"
    else:
        status, new_start, mark = info.get("status"), info.get("new_start"), info.get("memory_mark")
        if status not in ("running", "completed"):
            problem = f"unknown status {status!r}"
        elif not (isinstance(new_start, int) and 0 <= new_start <= len(saved.messages)):
            problem = f"bad new_start {new_start!r}"
        elif not (isinstance(mark, int) and 0 <= mark <= len(saved.messages)):
            problem = f"bad memory_mark {mark!r}"
        elif status == "completed" and not isinstance(info.get("text"), str):
            problem = "a completed run without its answer"
    if problem is not None:
        raise CheckpointCorruptError(
            f"checkpoint of run {saved.run_id!r} is not a daimon run state: {problem}"
        )
    return info  # type: ignore[return-value]
