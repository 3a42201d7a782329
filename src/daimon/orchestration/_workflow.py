"""WorkflowBuilder and Workflow: a DAG wired by typed field names."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage
from daimon.core.errors import OrchestrationError
from daimon.orchestration import _drawing
from daimon.orchestration._common import END, START, StepTiming, call
from daimon.orchestration._dag import check_run_options, topological_order
from daimon.orchestration._errors import OrchestrationBuildError, WiringError
from daimon.orchestration._fields import compatible, matches, type_name
from daimon.orchestration._flow_prompt import PromptsAsFlow
from daimon.orchestration._observe import NodeAgentObserver, NodeObserver
from daimon.orchestration._scheduler import DagNodeSpec, NodeContext, OnError, execute
from daimon.orchestration._workflow_node import WorkflowNode

__all__ = ("Workflow", "WorkflowBuilder", "WorkflowResult")

INPUT = "<input>"
"""Stands for the workflow's declared inputs among a field's producers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowResult:
    """What a workflow run produced; ``result["field"]`` reads a field."""

    fields: dict[str, Any]
    """Every field: the run's inputs, then each finished node's outputs."""
    failed: dict[str, Exception]
    """The error of each node that failed (``on_error="isolate"`` only)."""
    skipped: tuple[str, ...]
    """Nodes not run because a producer of one of their inputs failed or was skipped."""
    usage: Usage
    """Tokens used by every agent of the run."""
    cost: float
    """Dollars spent by every agent of the run."""
    timings: tuple[StepTiming, ...]
    """How long each node that ran took, in the order they finished."""
    kind: Literal["workflow_result"] = field(default="workflow_result", init=False, repr=False)

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]


class WorkflowBuilder:
    """Defines a workflow; :meth:`build` wires every input field to its producer, by name.

    Args:
        name: The workflow's name, in drawings and errors.
        inputs: The fields the run is given (name to type).
    """

    def __init__(self, name: str = "workflow", *, inputs: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.inputs: dict[str, Any] = dict(inputs or {})
        self._nodes: dict[str, WorkflowNode] = {}

    def add(
        self, node: WorkflowNode | Callable[..., Any], *, name: str | None = None
    ) -> WorkflowBuilder:
        """Add a :class:`WorkflowNode` (a plain function is read as ``workflow_node(fn)``)."""
        if not isinstance(node, WorkflowNode):
            node = WorkflowNode(node, name=name)
        elif name is not None and name != node.name:
            node = copy.copy(node)
            node.name = name
        if node.name in self._nodes:
            raise OrchestrationBuildError(f"duplicate node {node.name!r}", nodes=[node.name])
        self._nodes[node.name] = node
        return self

    def build(self) -> Workflow:
        """Wire the fields and check the result is a DAG.

        Raises:
            WiringError: An input field has no producer, or a field has several (nodes, or a
                node and the workflow's inputs), or a producer's type does not fit a consumer's.
                The error names the field, its consumers and its producers.
            OrchestrationBuildError: There are no nodes, or the wiring has a cycle.
        """
        if not self._nodes:
            raise OrchestrationBuildError(f"workflow {self.name!r} has no nodes")
        producers: dict[str, list[str]] = {name: [INPUT] for name in self.inputs}
        for node in self._nodes.values():
            for output in node.outputs:
                producers.setdefault(output, []).append(node.name)
        consumers: dict[str, list[str]] = {}
        for node in self._nodes.values():
            for name in node.inputs:
                consumers.setdefault(name, []).append(node.name)
        for name, makers in producers.items():
            if len(makers) > 1:
                raise WiringError(
                    f"workflow field {name!r} has {len(makers)} producers ({', '.join(makers)}); "
                    "each field needs exactly one",
                    field=name,
                    consumers=consumers.get(name, ()),
                    producers=makers,
                )
        sources: dict[str, dict[str, str | None]] = {}
        for node in self._nodes.values():
            sources[node.name] = wired = {}
            for name, wanted in node.inputs.items():
                if name not in producers:
                    if name in node.optional:
                        continue
                    raise WiringError(
                        f"workflow field {name!r}, an input of {', '.join(consumers[name])}, has "
                        "no producer: declare it in WorkflowBuilder(inputs=...) or add a node "
                        "that outputs it",
                        field=name,
                        consumers=consumers[name],
                        producers=(),
                    )
                maker = producers[name][0]
                have = self.inputs[name] if maker == INPUT else self._nodes[maker].outputs[name]
                if not compatible(have, wanted):
                    raise WiringError(
                        f"workflow field {name!r}: {maker} produces {type_name(have)} but "
                        f"{node.name} needs {type_name(wanted)}",
                        field=name,
                        consumers=[node.name],
                        producers=[maker],
                    )
                wired[name] = None if maker == INPUT else maker
        order = topological_order(
            {n: tuple(dict.fromkeys(p for p in sources[n].values() if p)) for n in self._nodes},
            f"workflow {self.name!r}",
        )
        return Workflow(self.name, MappingProxyType(dict(self.inputs)), self._nodes, sources, order)


class Workflow(PromptsAsFlow):
    """A wired workflow, built by :class:`WorkflowBuilder`; runs like a :class:`Dag`."""

    __slots__ = ("_dag", "inputs", "name", "nodes", "order", "sources")

    def __init__(
        self,
        name: str,
        inputs: Mapping[str, Any],
        nodes: Mapping[str, WorkflowNode],
        sources: Mapping[str, Mapping[str, str | None]],
        order: tuple[str, ...],
    ) -> None:
        self.name = name
        self.inputs = inputs
        """The declared input fields and their types."""
        self.nodes = MappingProxyType(dict(nodes))
        self.sources = MappingProxyType({n: MappingProxyType(dict(s)) for n, s in sources.items()})
        """For each node, where each input field comes from: a node, or ``None`` for an input."""
        self.order = order
        self._dag = MappingProxyType(
            {
                name: DagNodeSpec(
                    _runner(self.nodes[name], self.sources[name]),
                    tuple(dict.fromkeys(p for p in self.sources[name].values() if p)),
                    wants_context=True,
                )
                for name in order
            }
        )

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, nodes={list(self.order)})"

    async def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        cancel: CancelToken | None = None,
        on_error: OnError = "cancel",
        max_concurrency: int | None = None,
        on_node: NodeObserver | None = None,
        on_agent_event: NodeAgentObserver | None = None,
    ) -> WorkflowResult:
        """Run every node once its input fields exist, independent nodes in parallel.

        ``cancel``, ``on_error``, ``max_concurrency``, ``on_node`` and ``on_agent_event`` work as
        for :meth:`Dag.run` (a node's context reaches it through a :class:`NodeContext` parameter).

        Raises:
            OrchestrationError: ``inputs`` misses a declared input, has an unknown one, or a value
                of the wrong type.
        """
        check_run_options(on_error, max_concurrency)
        given = dict(inputs or {})
        missing = [name for name in self.inputs if name not in given]
        unknown = [name for name in given if name not in self.inputs]
        if missing or unknown:
            raise OrchestrationError(
                f"workflow {self.name!r} inputs: missing {', '.join(missing) or 'none'}; "
                f"unknown {', '.join(unknown) or 'none'}"
            )
        for name, tp in self.inputs.items():
            if not matches(given[name], tp):
                raise OrchestrationError(
                    f"workflow {self.name!r} input {name!r} is {type(given[name]).__name__}, "
                    f"declared {type_name(tp)}"
                )
        result = await execute(
            self._dag,
            self.order,
            given,
            cancel=cancel,
            on_error=on_error,
            max_concurrency=max_concurrency,
            on_node=on_node,
            on_agent_event=on_agent_event,
        )
        fields = dict(given)
        for outputs in result.outputs.values():
            fields.update(outputs)
        return WorkflowResult(
            fields=fields,
            failed=result.failed,
            skipped=result.skipped,
            usage=result.usage,
            cost=result.cost,
            timings=result.timings,
        )

    def edges(self) -> list[_drawing.Edge]:
        """Field flows, labelled by field: inputs come from START, unread outputs go to END."""
        edges: list[_drawing.Edge] = []
        consumed: set[str] = set()
        for name in self.order:
            by_source: dict[str, list[str]] = {}
            for input_field, producer in self.sources[name].items():
                by_source.setdefault(producer or START, []).append(input_field)
                consumed.add(input_field)
            edges += [_drawing.Edge(s, name, ", ".join(f)) for s, f in by_source.items()]
        for name in self.order:
            unread = [f for f in self.nodes[name].outputs if f not in consumed]
            if unread:
                edges.append(_drawing.Edge(name, END, ", ".join(unread)))
        return edges

    def to_mermaid(self) -> str:
        """The workflow as a Mermaid flowchart, edges labelled with fields."""
        return _drawing.mermaid(list(self.order), self.edges())

    def to_text(self) -> str:
        """The workflow as a plain-text listing of nodes and field edges."""
        return _drawing.text("workflow", self.name, list(self.order), self.edges())


def _runner(
    node: WorkflowNode, sources: Mapping[str, str | None]
) -> Callable[[Mapping[str, Any], NodeContext], Any]:
    """The DAG node that gathers ``node``'s input fields, calls it and checks its outputs."""

    async def run(outputs: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        kwargs = {
            name: ctx.run_inputs[name] if producer is None else outputs[producer][name]
            for name, producer in sources.items()
        }
        if node.context_param is not None:
            kwargs[node.context_param] = ctx
        return node.collect(await call(node.fn, **kwargs))

    return run
