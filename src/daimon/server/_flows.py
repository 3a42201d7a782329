"""Graphs, DAGs and workflows served like agents: a prompt in, an answer out, nodes reported.

::

    from daimon.server import ServedFlow, serve

    serve({"research": ServedFlow(graph, input=lambda text: {"question": text},
                                  output=lambda result: result.state["answer"])})

Without ``input=``, a graph or DAG run is given ``{"input": <prompt>}`` and a workflow its one
declared input field. Without ``output=``, the answer is a graph's ``state["output"]`` (its whole
state when it has no such key), a DAG's last node's output (a mapping by node when it ends in
several), or a workflow's result field (a mapping when it has several: the fields no node
reads). An answer that is not a string becomes its agent response's text, else compact JSON.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage
from daimon.core.errors import BuilderError, OrchestrationError
from daimon.core.results import AgentResponse
from daimon.orchestration import (
    END,
    START,
    Dag,
    DagResult,
    Graph,
    GraphResult,
    NodeAgentObserver,
    NodeObserver,
    Workflow,
    WorkflowResult,
)
from daimon.server._encode import jsonable

__all__ = ("Flow", "FlowAnswer", "FlowResult", "ServedFlow")

Flow: TypeAlias = Graph | Dag | Workflow
"""What :class:`ServedFlow` serves."""
FlowResult: TypeAlias = GraphResult | DagResult | WorkflowResult
"""What a served flow's run returns, and its ``output=`` function is given."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowAnswer:
    """One run of a served flow, ready for the wire."""

    text: str
    """The answer."""
    output: Any
    """What ``output=`` returned, as a JSON value (``None`` when it was the text itself)."""
    run_id: str
    usage: Usage
    cost: float


class ServedFlow:
    """A :class:`~daimon.orchestration.Graph`, ``Dag`` or ``Workflow`` that answers prompts.

    Args:
        flow: The flow.
        name: Its name on the server (default: the flow's own name).
        input: Makes the run's input (a graph's state, a DAG's or workflow's inputs) from the
            prompt; see the module docstring for the default.
        output: Makes the answer from the run's result; see the module docstring for the
            default.

    Raises:
        BuilderError: ``flow`` is not a graph, DAG or workflow, or a workflow needs ``input=``
            (it declares other than one input field).
    """

    __slots__ = ("_input", "_output", "flow", "kind", "name")

    def __init__(
        self,
        flow: Flow,
        *,
        name: str | None = None,
        input: Callable[[str], Mapping[str, Any]] | None = None,
        output: Callable[[Any], object] | None = None,
    ) -> None:
        if not isinstance(flow, (Graph, Dag, Workflow)):
            raise BuilderError(
                f"ServedFlow serves a Graph, Dag or Workflow, not {type(flow).__name__}"
            )
        self.flow = flow
        self.kind: Literal["graph", "dag", "workflow"] = (
            "graph" if isinstance(flow, Graph) else "dag" if isinstance(flow, Dag) else "workflow"
        )
        self.name = name if name is not None else flow.name
        self._input = input if input is not None else _default_input(flow)
        self._output = output if output is not None else _default_output(flow)

    def __repr__(self) -> str:
        return f"ServedFlow({self.flow!r}, name={self.name!r})"

    def nodes(self) -> list[str]:
        """The nodes, in definition (graph) or run (DAG, workflow) order."""
        flow = self.flow
        return list(flow.spec.nodes) if isinstance(flow, Graph) else list(flow.order)

    def drawing(self) -> dict[str, Any]:
        """The flow as data: ``{"kind", "nodes": [{"id", "label", "terminal"}], "edges"}``.

        START and END appear as terminal nodes when an edge uses them; edges carry ``source``,
        ``target``, ``label`` and ``dashed`` (a route a node may pick at run time).
        """
        edges = self.flow.edges()
        used = {edge.source for edge in edges} | {edge.target for edge in edges}
        names = [
            *([START] if START in used else []),
            *self.nodes(),
            *([END] if END in used else []),
        ]
        terminals = {START: "START", END: "END"}
        return {
            "kind": self.kind,
            "nodes": [
                {"id": name, "label": terminals.get(name, name), "terminal": name in terminals}
                for name in names
            ],
            "edges": [
                {"source": e.source, "target": e.target, "label": e.label, "dashed": e.dashed}
                for e in edges
            ],
        }

    async def run(
        self,
        text: str,
        *,
        cancel: CancelToken | None = None,
        on_node: NodeObserver | None = None,
        on_agent_event: NodeAgentObserver | None = None,
    ) -> FlowAnswer:
        """Run the flow on a prompt and make its answer.

        ``on_node`` and ``on_agent_event`` are given to the flow's ``run`` (see
        :data:`~daimon.orchestration.NodeEvent` and :class:`~daimon.orchestration.NodeAgentEvent`).

        Raises:
            OrchestrationError: ``input=`` or ``output=`` raised, or ``input=`` made no mapping.
            NodeError: A node failed (and whatever else the flow's ``run`` raises).
        """
        try:
            given = self._input(text)
        except Exception as exc:
            raise OrchestrationError(
                f"flow {self.name!r}: input= failed on the prompt: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(given, Mapping):
            raise OrchestrationError(
                f"flow {self.name!r}: input= must return a mapping, not {type(given).__name__}"
            )
        result: FlowResult = await self.flow.run(
            given, cancel=cancel, on_node=on_node, on_agent_event=on_agent_event
        )
        try:
            value = self._output(result)
        except Exception as exc:
            raise OrchestrationError(
                f"flow {self.name!r}: output= failed on the result: {type(exc).__name__}: {exc}"
            ) from exc
        return FlowAnswer(
            text=_text(value),
            output=None if isinstance(value, str) else jsonable(value),
            run_id=uuid.uuid4().hex,
            usage=result.usage,
            cost=result.cost,
        )


def _default_input(flow: Flow) -> Callable[[str], Mapping[str, Any]]:
    if not isinstance(flow, Workflow):
        return lambda text: {"input": text}
    if len(flow.inputs) != 1:
        declared = ", ".join(flow.inputs) or "none"
        raise BuilderError(
            f"workflow {flow.name!r} declares {len(flow.inputs)} input fields ({declared}): "
            "say how a prompt fills them with ServedFlow(..., input=lambda text: {...})"
        )
    (field,) = flow.inputs
    return lambda text: {field: text}


def _default_output(flow: Flow) -> Callable[[Any], object]:
    if isinstance(flow, Graph):
        return lambda result: result.state.get("output", result.state)
    if isinstance(flow, Dag):
        needed = {d for spec in flow.nodes.values() for d in spec.depends_on}
        sinks = [name for name in flow.order if name not in needed]
        return lambda result: _one_or_all(result.outputs, sinks)
    read = {field for sources in flow.sources.values() for field in sources}
    results = [f for name in flow.order for f in flow.nodes[name].outputs if f not in read]
    return lambda result: _one_or_all(result.fields, results)


def _one_or_all(values: Mapping[str, Any], names: list[str]) -> object:
    if len(names) == 1:
        return values.get(names[0])
    return {name: values[name] for name in names if name in values}


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, AgentResponse):
        return value.text
    return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":"))
