"""Orchestration: chains, graphs, DAGs and typed workflows of agents and functions.

* :class:`Chain`: steps in order over one context (``AgentStep``, ``TransformStep``, any callable).
* :class:`GraphBuilder` / :class:`Graph`: named nodes, edges, routers, joins and cycles, run in
  Pregel-style supersteps (parallel fan-out, fan-in), resumable from a checkpoint.
* :class:`DagBuilder` / :class:`Dag`: nodes with dependencies, independent ones in parallel.
* :class:`WorkflowBuilder` / :class:`Workflow`: a DAG wired by typed field names.

Agents plug in structurally (:class:`Promptable`: :mod:`daimon.core`'s one protocol, re-exported;
a step needs only its ``prompt``): usage and cost roll up into every result, and the run's
:class:`~daimon.core.CancelToken` reaches each agent call. Graph, DAG and workflow runs
tell an optional ``on_node`` observer each node's start, end and failure (:data:`NodeEvent`), and
an optional ``on_agent_event`` observer what the agents a node prompts do (:class:`NodeAgentEvent`).
A graph, DAG or workflow is itself a :class:`~daimon.core.protocols.Promptable` (text in, its
answer out; :class:`PromptableFlow` chooses the mapping), so every front end serves it.
Only the standard library and :mod:`daimon.core` are imported here.
"""

from daimon.orchestration._chain import (
    AgentStep,
    Chain,
    ChainContext,
    ChainResult,
    ChainStep,
    TransformStep,
)
from daimon.orchestration._common import END, START, Promptable, Renderable, StepTiming
from daimon.orchestration._dag import Dag, DagBuilder
from daimon.orchestration._errors import (
    MaxStepsError,
    NodeError,
    OrchestrationBuildError,
    StateConflictError,
    WiringError,
)
from daimon.orchestration._graph import (
    GraphContext,
    GraphNode,
    GraphResult,
    NodeOutcome,
    NodeResult,
    Router,
)
from daimon.orchestration._graph_builder import Graph, GraphBuilder
from daimon.orchestration._observe import (
    NodeAgentEvent,
    NodeAgentObserver,
    NodeEvent,
    NodeFailed,
    NodeFinished,
    NodeObserver,
    NodeSkipped,
    NodeStarted,
)
from daimon.orchestration._promptable import FlowAnswer, PromptableFlow
from daimon.orchestration._reducers import Reducer, append, merge
from daimon.orchestration._scheduler import DagResult, NodeContext, OnError
from daimon.orchestration._workflow import Workflow, WorkflowBuilder, WorkflowResult
from daimon.orchestration._workflow_node import WorkflowNode, workflow_node

__all__ = (
    "AgentStep",
    "Chain",
    "ChainContext",
    "ChainResult",
    "ChainStep",
    "Dag",
    "DagBuilder",
    "DagResult",
    "END",
    "FlowAnswer",
    "Graph",
    "GraphBuilder",
    "GraphContext",
    "GraphNode",
    "GraphResult",
    "MaxStepsError",
    "NodeAgentEvent",
    "NodeAgentObserver",
    "NodeContext",
    "NodeError",
    "NodeEvent",
    "NodeFailed",
    "NodeFinished",
    "NodeObserver",
    "NodeOutcome",
    "NodeResult",
    "NodeSkipped",
    "NodeStarted",
    "OnError",
    "OrchestrationBuildError",
    "Promptable",
    "PromptableFlow",
    "Reducer",
    "Renderable",
    "Router",
    "START",
    "StateConflictError",
    "StepTiming",
    "TransformStep",
    "WiringError",
    "Workflow",
    "WorkflowBuilder",
    "WorkflowNode",
    "WorkflowResult",
    "append",
    "merge",
    "workflow_node",
)
