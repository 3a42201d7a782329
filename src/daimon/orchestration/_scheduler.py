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
    run = _DagRun(
        nodes,
        run_inputs,
        cancel=cancel,
        on_error=on_error,
        max_concurrency=max_concurrency,
        on_node=on_node,
        on_agent_event=on_agent_event,
    )
    with cancellable(cancel):
        async with asyncio.TaskGroup() as group:
            run.group = group
            for name in order:
                if not run.waiting[name]:
                    group.create_task(run.run_node(name))
    return run.result(order)


class _DagRun:
    """One DAG run's state: what each node waits for, and what the finished ones left."""

    group: asyncio.TaskGroup

    def __init__(
        self,
        nodes: Mapping[str, DagNodeSpec],
        run_inputs: Mapping[str, Any],
        *,
        cancel: CancelToken | None,
        on_error: OnError,
        max_concurrency: int | None,
        on_node: NodeObserver | None,
        on_agent_event: NodeAgentObserver | None,
    ) -> None:
        self.nodes = nodes
        self.cancel = cancel
        self.on_error = on_error
        self.on_node = on_node
        self.on_agent_event = on_agent_event
        self.successors: dict[str, list[str]] = {name: [] for name in nodes}
        for name, spec in nodes.items():
            for dependency in spec.depends_on:
                self.successors[dependency].append(name)
        self.waiting = {name: len(spec.depends_on) for name, spec in nodes.items()}
        self.blocked: set[str] = set()
        self.outputs: dict[str, Any] = {}
        self.failed: dict[str, Exception] = {}
        self.skipped: set[str] = set()
        self.timings: list[StepTiming] = []
        self.tally = Tally()
        self.limit = asyncio.Semaphore(max_concurrency) if max_concurrency is not None else None
        self.inputs_view = dict(run_inputs)

    async def run_node(self, name: str) -> None:
        """Run one node, record its output or its failure, and start what it unblocks."""
        spec = self.nodes[name]
        if self.cancel is not None:
            self.cancel.raise_if_cancelled()
        args = self.arguments(name, spec)
        started = 0.0
        try:
            if self.limit is None:
                started = self.begin(name)
                result = await call(spec.fn, *args)
            else:
                async with self.limit:
                    started = self.begin(name)
                    result = await call(spec.fn, *args)
        except RunCancelled:
            raise
        except Exception as exc:
            self.node_failed(name, exc, time.perf_counter() - started)
            return
        seconds = time.perf_counter() - started
        self.timings.append(StepTiming(name=name, seconds=seconds))
        if self.on_node is not None:
            self.on_node(NodeFinished(node=name, seconds=seconds))
        self.tally.add_found(result)
        self.outputs[name] = result
        self.done(name, ok=True)

    def arguments(self, name: str, spec: DagNodeSpec) -> tuple[Any, ...]:
        """The node's inputs (its predecessors' outputs, or the run's), and its context if asked."""
        outputs = self.outputs
        inputs = (
            {d: outputs[d] for d in spec.depends_on} if spec.depends_on else dict(self.inputs_view)
        )
        if not spec.wants_context:
            return (inputs,)
        ctx = NodeContext(
            name,
            self.inputs_view,
            cancel=self.cancel,
            tally=self.tally,
            on_agent_event=self.on_agent_event,
        )
        return (inputs, ctx)

    def begin(self, name: str) -> float:
        """Tell the observer a node starts; the start time."""
        if self.on_node is not None:
            self.on_node(NodeStarted(node=name))
        return time.perf_counter()

    def node_failed(self, name: str, exc: Exception, seconds: float) -> None:
        """Cancel the run (``on_error="cancel"``), or record the failure and block descendants."""
        if self.on_node is not None:
            self.on_node(NodeFailed(node=name, seconds=seconds, error=exc))
        if self.on_error == "cancel":
            raise NodeError(name, exc) from exc
        self.failed[name] = exc
        self.done(name, ok=False)

    def done(self, name: str, *, ok: bool) -> None:
        """Start the successors that have nothing left to wait for; skip the blocked ones."""
        finished = [(name, ok)]
        while finished:
            node, node_ok = finished.pop()
            for successor in self.successors[node]:
                if not node_ok:
                    self.blocked.add(successor)
                self.waiting[successor] -= 1
                if self.waiting[successor]:
                    continue
                if successor in self.blocked:
                    self.skipped.add(successor)
                    if self.on_node is not None:
                        self.on_node(NodeSkipped(node=successor))
                    finished.append((successor, False))
                else:
                    self.group.create_task(self.run_node(successor))

    def result(self, order: Sequence[str]) -> DagResult:
        """What the run produced, each part in topological order."""
        return DagResult(
            outputs={name: self.outputs[name] for name in order if name in self.outputs},
            failed={name: self.failed[name] for name in order if name in self.failed},
            skipped=tuple(name for name in order if name in self.skipped),
            usage=self.tally.usage,
            cost=self.tally.cost,
            timings=tuple(self.timings),
        )
