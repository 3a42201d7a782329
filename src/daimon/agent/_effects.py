"""The run's effect ledger: each call of a tool that declares an effect, before and after it runs.

A call found started but never finished is in doubt.

The ledger is part of the run's checkpoint (:attr:`CheckpointState.effects`), so it is written in
the same atomic save as the rest of the run. A call's intent is saved before the call starts (one
save for all of a turn's calls), its result right after it returns. On resume a call with a
recorded result never runs again; a call in doubt does what its tool declared (``effect=``).
``repeatable`` calls are not recorded: in doubt they run again, which is what a call that never
started does, so a record would change nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from daimon.core.checkpoints import Effect, EffectRecord, EffectStatus, idempotency_key
from daimon.core.messages import ToolCall
from daimon.core.results import ApprovalDecision
from daimon.core.tools import ToolOutput

if TYPE_CHECKING:
    from daimon.agent._agent import Agent
    from daimon.state import RunState

__all__ = ("UNKNOWN_OUTCOME", "effect_of", "intend", "settle", "settle_doubts")

UNKNOWN_OUTCOME = (
    "The outcome of this call is unknown: the process running it stopped before its result was "
    "recorded, so it may or may not have taken effect. It was not run again."
)
"""What the model reads for a ``once`` call in doubt."""

_NOT_RUN_AGAIN = (
    "The outcome of this call is unknown: the process running it stopped before its result was "
    "recorded. A person decided not to run it again{reason}"
)


def effect_of(agent: Agent[Any, Any], call: ToolCall) -> Effect:
    """The effect the called tool declares (``repeatable`` for tools that declare none)."""
    effect: Effect = getattr(agent.tools.get(call.name), "effect", "repeatable")
    return effect


def _put(state: RunState, record: EffectRecord) -> None:
    state.effects = {**state.effects, record.call_id: record}  # replaced, never mutated


def _mark(state: RunState, record: EffectRecord, status: EffectStatus) -> None:
    _put(state, dataclasses.replace(record, status=status))


def intend(agent: Agent[Any, Any], state: RunState, calls: Sequence[ToolCall]) -> bool:
    """Record each call's intent whose tool declares an effect; whether any was recorded."""
    recorded = False
    for call in calls:
        effect = effect_of(agent, call)
        if effect == "repeatable":
            continue
        before = state.effects.get(call.id)
        _put(
            state,
            EffectRecord(
                call_id=call.id,
                tool=call.name,
                effect=effect,
                status="started",
                arguments_sha256=hashlib.sha256(call.arguments_json.encode()).hexdigest(),
                idempotency_key=idempotency_key(state.run_id, call.id),
                attempts=before.attempts + 1 if before is not None else 1,
            ),
        )
        recorded = True
    return recorded


def settle(state: RunState, call_id: str) -> None:
    """Mark a started call completed: its result is in (and saved with this state)."""
    record = state.effects.get(call_id)
    if record is not None and record.status == "started":
        _mark(state, record, "completed")


def settle_doubts(
    state: RunState,
    calls: Sequence[ToolCall],
    completed: dict[str, ToolOutput],
    decisions: Mapping[str, ApprovalDecision],
) -> list[ToolCall]:
    """Decide each call in doubt by its tool's effect; the ``ask`` calls still waiting for a person.

    A ``once`` call gets :data:`UNKNOWN_OUTCOME` as its result; an ``ask`` call waits for a
    decision (approved: it runs again; rejected: the model is told it was not); ``repeatable`` and
    ``keyed`` calls run again (their intent is recorded again, one attempt more).
    """
    effects = state.effects
    waiting: list[ToolCall] = []
    for call in calls:
        record = effects.get(call.id)
        if record is None or call.id in completed or record.status not in ("started", "in_doubt"):
            continue
        if record.effect == "once":
            completed[call.id] = ToolOutput.error(UNKNOWN_OUTCOME)
            _mark(state, record, "in_doubt")
        elif record.effect == "ask":
            decision = decisions.get(call.id)
            if decision is None:
                waiting.append(call)
                _mark(state, record, "in_doubt")
            elif not decision.approved:
                reason = f": {decision.reason}" if decision.reason else "."
                completed[call.id] = ToolOutput.error(_NOT_RUN_AGAIN.format(reason=reason))
                _mark(state, record, "skipped")
    return waiting
