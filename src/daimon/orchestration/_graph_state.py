"""A graph run's progress, and how it is kept in a checkpoint.

The checkpoint keeps ``CheckpointState.custom["graph"]`` (JSON values only)::

    {"step": 3, "next": ["b", "c"], "state": {...}, "joins": [["b"]], "done": {"b": {...}}}

``step`` counts finished supersteps, ``next`` lists the nodes of the next one, ``joins`` the
sources each join has seen, and ``done`` the outcomes of nodes of the unfinished superstep that
completed before a sibling failed or the run was cancelled: resuming runs only the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import OrchestrationError
from daimon.core.protocols import Checkpoint
from daimon.orchestration._common import Tally
from daimon.orchestration._graph import GraphSpec

__all__ = ("Outcome", "Progress", "restore", "save", "save_after_failure")


@dataclass(slots=True)
class Outcome:
    """What one node returned: its state update and where it chose to go."""

    update: dict[str, Any] | None
    goto: tuple[str, ...] | None

    def to_data(self) -> dict[str, Any]:
        """The outcome as JSON data."""
        return {"update": self.update, "goto": None if self.goto is None else list(self.goto)}


@dataclass(slots=True)
class Progress:
    """Where a run is: between supersteps, or inside one with some nodes done."""

    step: int
    next: list[str]
    state: dict[str, Any]
    joins: list[list[str]]
    done: dict[str, Outcome]

    def to_data(self) -> dict[str, Any]:
        """The progress as JSON data."""
        return {
            "step": self.step,
            "next": list(self.next),
            "state": self.state,
            "joins": self.joins,
            "done": {name: outcome.to_data() for name, outcome in self.done.items()},
        }


def restore(graph: GraphSpec, saved: CheckpointState) -> Progress:
    """The progress a checkpoint holds, checked against ``graph``."""
    data = saved.custom.get("graph")
    try:
        if not isinstance(data, dict):
            raise TypeError("it holds no 'graph' entry")
        progress = Progress(
            step=int(data["step"]),
            next=[str(name) for name in data["next"]],
            state=dict(data["state"]),
            joins=[[str(name) for name in seen] for seen in data["joins"]],
            done={
                str(name): Outcome(
                    dict(done["update"]) if done["update"] is not None else None,
                    None if done["goto"] is None else tuple(done["goto"]),
                )
                for name, done in data["done"].items()
            },
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise OrchestrationError(
            f"the checkpoint of run {saved.run_id!r} is not a graph checkpoint: {exc}"
        ) from exc
    unknown = sorted({*progress.next, *progress.done} - set(graph.nodes))
    if unknown or len(progress.joins) != len(graph.joins):
        raise OrchestrationError(
            f"the checkpoint of run {saved.run_id!r} was saved by a different graph "
            f"(unknown nodes: {', '.join(unknown) or 'none'})"
        )
    return progress


async def save(checkpoint: Checkpoint, run_id: str, progress: Progress, tally: Tally) -> None:
    """Save the progress, after checking every state value is JSON."""
    values = [(key, value) for key, value in progress.state.items()]
    for outcome in progress.done.values():
        values += (outcome.update or {}).items()
    for key, value in values:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise OrchestrationError(
                f"state key {key!r} is not a JSON value ({exc}); the state of a checkpointed "
                "graph must be JSON"
            ) from exc
    state = CheckpointState(
        run_id=run_id,
        iteration=progress.step,
        usage=tally.usage,
        cost=tally.cost,
        custom={"graph": progress.to_data()},
    )
    await checkpoint.save(state)


async def save_after_failure(
    checkpoint: Checkpoint, run_id: str, progress: Progress, tally: Tally, error: Exception
) -> None:
    """Keep the finished nodes' work; a failed save must not hide the run's own error."""
    try:
        await save(checkpoint, run_id, progress, tally)
    except Exception as exc:
        error.add_note(f"saving the checkpoint after the failure failed too: {exc!r}")
