"""The tools' turn: decide which calls run, run them concurrently, record each result."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from daimon.agent._effects import settle
from daimon.core._fastinit import fast_new
from daimon.core.checkpoints import RunProgress
from daimon.core.errors import RunCancelled
from daimon.core.events import ToolResult
from daimon.core.messages import ContentPart, Message, Role, TextPart, ToolCall
from daimon.core.results import ApprovalDecision
from daimon.core.tools import ToolOutput
from daimon.extensions import CallTool
from daimon.tools import EndRun

if TYPE_CHECKING:
    from daimon.agent._agent import Agent
    from daimon.agent._checkpointing import RunCheckpointer
    from daimon.state import RunState

__all__ = (
    "Ended",
    "NO_PROGRESS",
    "ToolTurn",
    "add_results",
    "apply_decisions",
    "ran_results",
    "runnable",
    "with_unique_call_ids",
)


# One per tool result: fast_new skips calling the class (measured with the others: agent/_run.py).
_new_message = fast_new(Message)
NO_PROGRESS = RunProgress()
"""A run's progress before it has any (progress is immutable: one object serves every run)."""


class Ended(Exception):
    """A tool raised EndRun; carries the call it came from (internal)."""

    def __init__(self, end: EndRun, call: ToolCall) -> None:
        super().__init__(str(end))
        self.end = end
        self.call = call


def with_unique_call_ids(assistant: Message) -> Message:
    """``assistant`` with every tool call under its own id, before any of them runs.

    Results are matched to calls by id; two calls sharing one (some models repeat ids) would both
    get one result. A repeated id gets the first free ``<id>~<n>`` (n from 2), in the message that
    is kept and sent back, so each result reaches the model under the call that produced it.
    """
    calls = assistant.tool_calls
    ids = {call.id for call in calls}
    if len(ids) == len(calls):
        return assistant
    seen: set[str] = set()
    unique: list[ToolCall] = []
    for call in calls:
        if call.id in seen:
            n = 2
            while f"{call.id}~{n}" in ids:
                n += 1
            call = dataclasses.replace(call, id=f"{call.id}~{n}")
            ids.add(call.id)
        seen.add(call.id)
        unique.append(call)
    return dataclasses.replace(assistant, tool_calls=tuple(unique))


def apply_decisions(
    agent: Agent[Any, Any],
    calls: Sequence[ToolCall],
    completed: dict[str, ToolOutput],
    decisions: Mapping[str, ApprovalDecision],
) -> Sequence[ToolCall]:
    """Record rejections as results; the calls still waiting for a decision."""
    waiting: list[ToolCall] = []
    for call in calls:
        if call.id in completed or not _requires_approval(agent, call):
            continue
        decision = decisions.get(call.id)
        if decision is None:
            waiting.append(call)
        elif not decision.approved:
            reason = f": {decision.reason}" if decision.reason else "."
            completed[call.id] = ToolOutput.error(f"The user rejected this call{reason}")
    return waiting


def _requires_approval(agent: Agent[Any, Any], call: ToolCall) -> bool:
    found = agent.tools.get(call.name)
    return bool(getattr(found, "requires_approval", False))


def runnable(
    calls: Sequence[ToolCall], completed: Mapping[str, ToolOutput], waiting: Sequence[ToolCall]
) -> Sequence[ToolCall]:
    """The calls to run now: not decided already (rejected, resumed) and not awaiting approval."""
    if not completed and not waiting:
        return calls
    return [c for c in calls if c.id not in completed and c not in waiting]


def _with_media(output: ToolOutput) -> tuple[ContentPart, ...]:
    """A result's text and media as a tool message's parts."""
    text: tuple[ContentPart, ...] = (TextPart(text=output.content),) if output.content else ()
    return text + output.media


def add_results(
    messages: list[Message],
    calls: Sequence[ToolCall],
    completed: Mapping[str, ToolOutput],
    durations: Mapping[str, float] | None,
    ended: Ended | None,
) -> list[ToolResult]:
    """Append the turn's tool messages, in call order; the ToolResult events when streaming."""
    events: list[ToolResult] = []
    for call in calls:
        ends = ended is not None and call is ended.call
        if ends:
            assert ended is not None
            output = ToolOutput.text(ended.end.text or "Done.")
        else:
            output = completed.get(call.id) or ToolOutput.error("Not run: the run ended.")
        messages.append(
            _new_message(
                role=Role.TOOL,
                content=output.content if not output.media else _with_media(output),
                tool_call_id=call.id,
                name=call.name,
                is_error=output.is_error,
            )
        )
        if durations is not None and (ends or call.id in durations):
            events.append(
                ToolResult(
                    call_id=call.id,
                    name=call.name,
                    output=output,
                    duration=durations.get(call.id, 0.0),
                )
            )
    return events


def ran_results(
    calls: Sequence[ToolCall], completed: Mapping[str, ToolOutput], durations: Mapping[str, float]
) -> list[ToolResult]:
    """The result events of the calls that ran in a turn that then paused."""
    return [
        ToolResult(call_id=c.id, name=c.name, output=completed[c.id], duration=durations[c.id])
        for c in calls
        if c.id in durations and c.id in completed
    ]


class ToolTurn:
    """Runs one turn's tool calls, recording each result in ``completed`` (and its checkpoint)."""

    __slots__ = (
        "_call",
        "_calls",
        "_checkpointer",
        "_progress",
        "_state",
        "completed",
        "durations",
    )

    def __init__(
        self, call: CallTool, state: RunState, completed: dict[str, ToolOutput], timed: bool
    ) -> None:
        self._call = call
        self._state = state
        """The run: its effect ledger marks each recorded call completed as its result comes in."""
        """A tool call through the agent's extensions (or the tool itself when it has none)."""
        self.completed = completed
        self.durations: dict[str, float] | None = {} if timed else None
        """Seconds each call took, by call id, when the stream reports them."""
        self._checkpointer: RunCheckpointer | None = None
        self._calls: Sequence[ToolCall] = ()
        self._progress = NO_PROGRESS

    def checkpoint(
        self, checkpointer: RunCheckpointer, calls: Sequence[ToolCall], progress: RunProgress
    ) -> None:
        """Save the turn after each result."""
        self._checkpointer = checkpointer
        self._calls = calls
        self._progress = progress

    async def run(self, calls: Sequence[ToolCall]) -> None:
        """Run the calls concurrently, each in its own task."""
        try:
            async with asyncio.TaskGroup() as group:
                for call in calls:
                    group.create_task(self.run_one(call))
        except BaseExceptionGroup as failures:
            surfaced = _one_of(failures)
            if surfaced is failures:
                raise
            raise surfaced from failures

    async def run_one(self, call: ToolCall) -> None:
        """Run one call through the extensions and the registry; record its result."""
        key = call.id
        started = time.perf_counter()
        try:
            output = await self._call(call)
        except EndRun as end:
            if self._state.effects:
                settle(self._state, key)  # it returned: its end is its result
            raise Ended(end, call) from None
        self.completed[key] = output
        if self._state.effects:
            settle(self._state, key)
        if self.durations is not None:
            self.durations[key] = time.perf_counter() - started
        if self._checkpointer is not None:
            await self._checkpointer.save(self._calls, self.completed, self._progress)


def _one_of(failures: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one failure to surface from a turn's concurrent calls.

    Tools report their own errors as results, so only a signal, an extension's or hook's failure (or
    the process going down) lands here: a lone one as itself, else an EndRun, else one
    cancellation for calls that honoured the same cancelled token, else the group.
    """
    if len(failures.exceptions) == 1:
        return failures.exceptions[0]
    for kind in (Ended, RunCancelled):
        found = [e for e in failures.exceptions if isinstance(e, kind)]
        if found:
            return found[0]
    return failures
