"""Graphs, DAGs and workflows as promptables: a prompt in, the flow run, its answer out.

::

    from daimon.orchestration import PromptableFlow

    research = PromptableFlow(graph, input=lambda text: {"question": text},
                              output=lambda result: result.state["answer"])
    response = await research.prompt("Why is the sky blue?")  # an AgentResponse

A bare ``Graph``, ``Dag`` or ``Workflow`` is promptable too (``await graph.prompt(text)``), with the
defaults below; every front end (``daimon serve``, the worker, MCP, A2A, ``AgentTool``) serves any
of them.

The mapping: without ``input=``, a graph or DAG run is given ``{"input": <prompt>}`` and a workflow
its one declared input field. Without ``output=``, the answer is a graph's ``state["output"]`` (its
whole state when it has no such key), a DAG's last node's output (a mapping by node when it ends
in several), or a workflow's result field (a mapping when it has several: the fields no node
reads). The response's ``output`` is that value; its ``text`` is the value if it is a string, an
agent response's text, else compact JSON. Usage and cost are the whole run's; ``iterations`` is
its model calls.

A flow keeps no conversation: ``session_id`` and ``deps`` are accepted and not used (each prompt
is a run of its own), and ``history`` or ``instructions`` raise :class:`BuilderError`. Streamed,
a flow sends the tool calls, tool results and usage of the agents its nodes prompt (through
``ctx.prompt``) as they happen, then its answer as one ``TextDelta`` and ``Done``: the text of a
flow's stream is its answer, as in :meth:`prompt`, not its agents' drafts (a server's node-by-node
view shows those). A node's agent that pauses for approvals fails the run with
:class:`~daimon.core.errors.ApprovalRequiredError` (naming the node and the flow), as every
front end expects of a run that cannot pause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from daimon.core import codec
from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage
from daimon.core.errors import (
    ApprovalRequiredError,
    BuilderError,
    OrchestrationError,
    SerializationError,
)
from daimon.core.events import Done, StreamEvent, TextDelta
from daimon.core.messages import Message
from daimon.core.results import AgentResponse
from daimon.orchestration._common import END, START
from daimon.orchestration._dag import Dag
from daimon.orchestration._errors import NodeError
from daimon.orchestration._graph import GraphResult
from daimon.orchestration._graph_builder import Graph
from daimon.orchestration._observe import NodeAgentEvent, NodeAgentObserver, NodeObserver
from daimon.orchestration._scheduler import DagResult
from daimon.orchestration._workflow import Workflow, WorkflowResult

__all__ = ("Flow", "FlowAnswer", "FlowResult", "PromptableFlow")

Flow: TypeAlias = Graph | Dag | Workflow
"""What :class:`PromptableFlow` serves."""
FlowResult: TypeAlias = GraphResult | DagResult | WorkflowResult
"""What a flow's run returns, and its ``output=`` function is given."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowAnswer:
    """One run of a flow on a prompt: its answer, as text and as the value ``output=`` made."""

    text: str
    """The answer."""
    output: Any
    """What ``output=`` returned (``None`` when it was the text itself)."""
    run_id: str
    usage: Usage
    cost: float


class PromptableFlow:
    """A :class:`~daimon.orchestration.Graph`, ``Dag`` or ``Workflow`` that answers prompts.

    Implements :class:`~daimon.core.protocols.Promptable`; see the module docstring for how a
    prompt becomes the flow's input and its result the answer.

    Args:
        flow: The flow.
        name: Its name (default: the flow's own name).
        input: Makes the run's input (a graph's state, a DAG's or workflow's inputs) from the
            prompt.
        output: Makes the answer from the run's result.

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
                f"PromptableFlow (ServedFlow) serves a Graph, Dag or Workflow, not "
                f"{type(flow).__name__}"
            )
        self.flow = flow
        self.kind: Literal["graph", "dag", "workflow"] = (
            "graph" if isinstance(flow, Graph) else "dag" if isinstance(flow, Dag) else "workflow"
        )
        self.name = name if name is not None else flow.name
        self._input = input if input is not None else _default_input(flow)
        self._output = output if output is not None else _default_output(flow)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.flow!r}, name={self.name!r})"

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
        run_id: str | None = None,
    ) -> FlowAnswer:
        """Run the flow on a prompt and make its answer.

        ``on_node`` and ``on_agent_event`` are given to the flow's ``run`` (see
        :data:`~daimon.orchestration.NodeEvent` and :class:`~daimon.orchestration.NodeAgentEvent`).

        Raises:
            OrchestrationError: ``input=`` or ``output=`` raised, or ``input=`` made no mapping.
            ApprovalRequiredError: An agent of a node paused for approvals.
            NodeError: A node failed (and whatever else the flow's ``run`` raises).
        """
        given = self._given(text)
        try:
            result: FlowResult = await self.flow.run(
                given, cancel=cancel, on_node=on_node, on_agent_event=on_agent_event
            )
        except NodeError as exc:
            paused = exc.__cause__
            if isinstance(paused, ApprovalRequiredError):
                where = f"node {exc.node!r} of flow {self.name!r}"
                raise ApprovalRequiredError(paused.approvals, where) from exc
            raise
        try:
            value = self._output(result)
        except Exception as exc:
            raise OrchestrationError(
                f"flow {self.name!r}: output= failed on the result: {type(exc).__name__}: {exc}"
            ) from exc
        return FlowAnswer(
            text=_text(value),
            output=None if isinstance(value, str) else value,
            run_id=run_id or uuid.uuid4().hex,
            usage=result.usage,
            cost=result.cost,
        )

    async def prompt(
        self,
        input: str | Message,
        /,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse[Any]:
        """Run the flow on the prompt's text; the answer as an agent's response.

        ``session_id`` and ``deps`` are not used (a flow keeps no conversation).

        Raises:
            BuilderError: ``history`` or ``instructions`` was given.
        """
        text = self._text_of(input, history, instructions)
        answer = await self.run(text, cancel=cancel, run_id=run_id)
        return self._response(text, answer)

    def prompt_stream(
        self,
        input: str | Message,
        /,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run the flow, streaming its agents' tool calls and usage, then the answer and ``Done``.

        Takes the arguments of :meth:`prompt`.
        """
        text = self._text_of(input, history, instructions)
        return self._stream(text, run_id, cancel)

    async def _stream(
        self, text: str, run_id: str | None, cancel: CancelToken | None
    ) -> AsyncGenerator[StreamEvent, None]:
        queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()

        def tell(event: NodeAgentEvent) -> None:
            if not isinstance(event.event, (TextDelta, Done)):
                queue.put_nowait(event.event)

        run = asyncio.create_task(self.run(text, cancel=cancel, on_agent_event=tell, run_id=run_id))
        run.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            answer = run.result()  # the run's error, if it failed, ends the stream
        finally:
            if not run.done():  # the consumer left: stop the run and wait for it
                run.cancel()
                await asyncio.wait({run})
            if not run.cancelled():
                run.exception()  # retrieved: a run the consumer left is no error to log
        if answer.text:
            yield TextDelta(text=answer.text)
        yield Done(response=self._response(text, answer))

    def _given(self, text: str) -> Mapping[str, Any]:
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
        return given

    def _text_of(
        self, input: str | Message, history: Sequence[Message] | None, instructions: str | None
    ) -> str:
        if history or instructions:
            raise BuilderError(
                f"flow {self.name!r} keeps no conversation: it takes one prompt, without "
                "history or instructions"
            )
        return input if isinstance(input, str) else input.text

    def _response(self, text: str, answer: FlowAnswer) -> AgentResponse[Any]:
        return AgentResponse(
            text=answer.text,
            messages=(Message.user(text), Message.assistant(answer.text)),
            iterations=answer.usage.requests,
            usage=answer.usage,
            cost=answer.cost,
            run_id=answer.run_id,
            output=answer.text if answer.output is None else answer.output,
        )


def _default_input(flow: Flow) -> Callable[[str], Mapping[str, Any]]:
    if not isinstance(flow, Workflow):
        return lambda text: {"input": text}
    if len(flow.inputs) != 1:
        declared = ", ".join(flow.inputs) or "none"
        raise BuilderError(
            f"workflow {flow.name!r} declares {len(flow.inputs)} input fields ({declared}): "
            "say how a prompt fills them with PromptableFlow(..., input=lambda text: {...})"
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
    """The answer's text: a string as it is, a response's text, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, AgentResponse):
        return value.text
    return json.dumps(_json_value(value), ensure_ascii=False, separators=(",", ":"), default=repr)


def _json_value(value: object) -> Any:
    """A JSON value for ``value``: daimon's codec, a pydantic model's dump, a dataclass's fields."""
    try:
        return codec.to_data(value)
    except SerializationError:
        pass
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_value(item) for item in value]
    return value
