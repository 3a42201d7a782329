"""The DAG engine: each node runs as soon as all its predecessors are done, in parallel."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage
from daimon.core.errors import RunCancelled
from daimon.orchestration._common import ContextBase, StepTiming, Tally, call
from daimon.orchestration._errors import NodeError
from daimon.orchestration._observe import (
    NodeAgentObserver,
    NodeFailed,
    NodeFinished,
    NodeObserver,
    NodeSkipped,
    NodeStarted,
    agent_teller,
)
from daimon.orchestration._tasks import cancellable

__all__ = ("DagNodeSpec", "DagResult", "NodeContext", "OnError", "execute")

OnError: TypeAlias = Literal["cancel", "isolate"]
"""What a node's failure does: cancel the whole run, or skip only the node's descendants."""


class NodeContext(ContextBase):
    """What a DAG or workflow node sees when it asks for a second argument.

    Attributes:
        node: The node's name.
        run_inputs: The inputs the run was given.
        cancel: The run's cancel token, or ``None``.
    """

    __slots__ = ("node", "run_inputs")

    def __init__(
        self,
        node: str,
        run_inputs: Mapping[str, Any],
        *,
        cancel: CancelToken | None = None,
        tally: Tally | None = None,
        on_agent_event: NodeAgentObserver | None = None,
    ) -> None:
        tell = None if on_agent_event is None else agent_teller(on_agent_event, node)
        super().__init__(cancel, tally if tally is not None else Tally(), tell)
        self.node = node
        self.run_inputs = run_inputs


@dataclass(frozen=True, slots=True)
class DagNodeSpec:
    """A node, what it depends on, and whether it takes a :class:`NodeContext` too."""

    fn: Callable[..., Any]
    depends_on: tuple[str, ...]
    wants_context: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DagResult:
    """What a DAG run produced."""

    outputs: dict[str, Any]
    """Each finished node's output, by node name."""
    failed: dict[str, Exception]
    """The error of each node that failed (``on_error="isolate"`` only)."""
    skipped: tuple[str, ...]
    """Nodes not run because a predecessor failed or was skipped (``"isolate"`` only)."""
    usage: Usage
    """Tokens used by every agent of the run."""
    cost: float
    """Dollars spent by every agent of the run."""
    timings: tuple[StepTiming, ...]
    """How long each node that ran took, in the order they finished."""
    kind: Literal["dag_result"] = field(default="dag_result", init=False, repr=False)

    @property
    def ok(self) -> bool:
        """Whether every node ran and none failed."""
        return not self.failed and not self.skipped


async def execute(
    nodes: Mapping[str, DagNodeSpec],
    order: Sequence[str],
    run_inputs: Mapping[str, Any],
    *,
    cancel: CancelToken | None,
    on_error: OnError,
    max_concurrency: int | None,
    on_node: NodeObserver | None = None,
    on_agent_event: NodeAgentObserver | None = None,
) -> DagResult:
    """Run ``nodes`` (checked, ``order`` topological) under ``cancel``; tell the observers."""
    if cancel is not None:
        cancel.raise_if_cancelled()
    successors: dict[str, list[str]] = {name: [] for name in nodes}
    for name, spec in nodes.items():
        for dependency in spec.depends_on:
            successors[dependency].append(name)
    waiting = {name: len(spec.depends_on) for name, spec in nodes.items()}
    blocked: set[str] = set()
    outputs: dict[str, Any] = {}
    failed: dict[str, Exception] = {}
    skipped: set[str] = set()
    timings: list[StepTiming] = []
    tally = Tally()
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency is not None else None
    inputs_view = dict(run_inputs)

    async def run_node(name: str) -> None:
        spec = nodes[name]
        if cancel is not None:
            cancel.raise_if_cancelled()
        inputs = {d: outputs[d] for d in spec.depends_on} if spec.depends_on else dict(inputs_view)
        args: tuple[Any, ...] = (inputs,)
        if spec.wants_context:
            ctx = NodeContext(
                name, inputs_view, cancel=cancel, tally=tally, on_agent_event=on_agent_event
            )
            args += (ctx,)
        started = 0.0
        try:
            if limit is None:
                started = begin(name)
                result = await call(spec.fn, *args)
            else:
                async with limit:
                    started = begin(name)
                    result = await call(spec.fn, *args)
        except RunCancelled:
            raise
        except Exception as exc:
            if on_node is not None:
                seconds = time.perf_counter() - started
                on_node(NodeFailed(node=name, seconds=seconds, error=exc))
            if on_error == "cancel":
                raise NodeError(name, exc) from exc
            failed[name] = exc
            done(name, ok=False)
            return
        seconds = time.perf_counter() - started
        timings.append(StepTiming(name=name, seconds=seconds))
        if on_node is not None:
            on_node(NodeFinished(node=name, seconds=seconds))
        tally.add_found(result)
        outputs[name] = result
        done(name, ok=True)

    def begin(name: str) -> float:
        if on_node is not None:
            on_node(NodeStarted(node=name))
        return time.perf_counter()

    def done(name: str, *, ok: bool) -> None:
        """Start the successors that have nothing left to wait for; skip the blocked ones."""
        finished = [(name, ok)]
        while finished:
            node, node_ok = finished.pop()
            for successor in successors[node]:
                if not node_ok:
                    blocked.add(successor)
                waiting[successor] -= 1
                if waiting[successor]:
                    continue
                if successor in blocked:
                    skipped.add(successor)
                    if on_node is not None:
                        on_node(NodeSkipped(node=successor))
                    finished.append((successor, False))
                else:
                    group.create_task(run_node(successor))

    with cancellable(cancel):
        async with asyncio.TaskGroup() as group:
            for name in order:
                if not waiting[name]:
                    group.create_task(run_node(name))
    return DagResult(
        outputs={name: outputs[name] for name in order if name in outputs},
        failed={name: failed[name] for name in order if name in failed},
        skipped=tuple(name for name in order if name in skipped),
        usage=tally.usage,
        cost=tally.cost,
        timings=tuple(timings),
    )
