"""Every kind of promptable is a ``Promptable`` to a type checker, not only at run time.

Not a test module: ``test_types.py`` runs mypy over this file. The runtime check
(``isinstance(x, Promptable)``) sees only that the members exist; this checks their signatures.
"""

from __future__ import annotations

from dataclasses import dataclass

from daimon import Agent
from daimon.core import Promptable, Resumable
from daimon.models import ScriptedModel
from daimon.multiagent import AgentTool, HandoffNetwork, Supervisor
from daimon.orchestration import (
    END,
    START,
    DagBuilder,
    GraphBuilder,
    PromptableFlow,
    WorkflowBuilder,
    workflow_node,
)
from daimon.server import ServedFlow


@dataclass
class City:
    name: str


agent = Agent(ScriptedModel([]), name="a")
typed: Agent[int, City] = Agent(ScriptedModel([]), output_type=City, deps_type=int)
supervisor = Supervisor(ScriptedModel([]), {"a": agent})
network = HandoffNetwork({"a": agent}, start="a")
graph = GraphBuilder("g").add_node("n", lambda ctx: {}).add_edge(START, "n").add_edge("n", END)
dag = DagBuilder("d").add_node("n", lambda inputs: 1).build()
workflow = (
    WorkflowBuilder("w", inputs={"text": str})
    .add(workflow_node(output="out")(lambda text: text), name="n")
    .build()
)

promptables: list[Promptable] = [
    agent,
    typed,
    supervisor,
    network,
    graph.build(),
    dag,
    workflow,
    PromptableFlow(workflow),
    ServedFlow(dag),
]
resumables: list[Resumable] = [agent, typed, supervisor]
tools = [AgentTool(p, name="t", description="d") for p in promptables]
team = Supervisor(ScriptedModel([]), {"network": network, "flow": workflow, "agent": agent})
