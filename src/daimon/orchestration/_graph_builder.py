"""GraphBuilder and Graph: named nodes, edges, routers and joins, checked when built."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from daimon.core.cancel import CancelToken
from daimon.core.protocols import Checkpoint
from daimon.orchestration import _drawing
from daimon.orchestration._errors import OrchestrationBuildError
from daimon.orchestration._flow_prompt import PromptsAsFlow
from daimon.orchestration._graph import (
    END,
    START,
    GraphNode,
    GraphResult,
    GraphSpec,
    Join,
    NodeSpec,
    Router,
    RouterSpec,
)
from daimon.orchestration._observe import NodeAgentObserver, NodeObserver
from daimon.orchestration._pregel import run_graph
from daimon.orchestration._reducers import Reducer

__all__ = ("Graph", "GraphBuilder")


class GraphBuilder:
    """Defines a graph; :meth:`build` checks it and returns a runnable :class:`Graph`.

    Each superstep runs its nodes in parallel; where a node goes next is, in order of precedence:
    the ``goto`` it returns (one of its declared ``destinations``), else its edges plus what its
    router picks. A node scheduled by several nodes in one superstep runs once (fan-in); a join
    waits for all its sources across supersteps. Cycles are allowed; ``max_steps`` bounds them.

    Args:
        name: The graph's name, in drawings.
        reducers: How to merge updates of a state key (default: the last write wins, and two
            parallel writes are an error), e.g. ``{"log": append}``.
    """

    def __init__(
        self, name: str = "graph", *, reducers: Mapping[str, Reducer] | None = None
    ) -> None:
        self.name = name
        self._reducers = dict(reducers or {})
        self._nodes: dict[str, NodeSpec] = {}
        self._edges: dict[str, list[str]] = {}
        self._routers: dict[str, RouterSpec] = {}
        self._joins: list[Join] = []
        for key, reducer in self._reducers.items():
            if not callable(reducer):
                raise OrchestrationBuildError(f"the reducer of state key {key!r} is not callable")

    def add_node(
        self, name: str, node: GraphNode, *, destinations: Sequence[str] = ()
    ) -> GraphBuilder:
        """Add a node; ``destinations`` lists every node (or END) it may return as ``goto``."""
        if not isinstance(name, str) or not name:
            raise OrchestrationBuildError(f"a node name must be a non-empty string, got {name!r}")
        if name in (START, END):
            raise OrchestrationBuildError(f"{name!r} is reserved", nodes=[name])
        if name in self._nodes:
            raise OrchestrationBuildError(f"duplicate node {name!r}", nodes=[name])
        if not callable(node):
            raise OrchestrationBuildError(f"node {name!r} is not callable", nodes=[name])
        targets = (destinations,) if isinstance(destinations, str) else tuple(destinations)
        self._nodes[name] = NodeSpec(node, targets)
        return self

    def add_edge(self, source: str, target: str) -> GraphBuilder:
        """Go from ``source`` (or START) to ``target`` (or END) after ``source`` runs."""
        if source == END or target == START:
            raise OrchestrationBuildError(
                f"no edge may leave END or enter START: {source!r} -> {target!r}"
            )
        targets = self._edges.setdefault(source, [])
        if target in targets:
            raise OrchestrationBuildError(
                f"duplicate edge {source!r} -> {target!r}", nodes=[source, target]
            )
        targets.append(target)
        return self

    def add_router(
        self, source: str, router: Router, routes: Mapping[str, str] | Sequence[str]
    ) -> GraphBuilder:
        """After ``source`` (or START), go where ``router(state)`` points.

        The router returns route label(s); ``routes`` maps each label to a node (or END). A list
        of node names is shorthand for labels that are the names themselves.
        """
        if source == END:
            raise OrchestrationBuildError("END cannot have a router")
        if source in self._routers:
            raise OrchestrationBuildError(f"node {source!r} already has a router", nodes=[source])
        if not callable(router):
            raise OrchestrationBuildError(
                f"the router of {source!r} is not callable", nodes=[source]
            )
        table = dict(routes) if isinstance(routes, Mapping) else {name: name for name in routes}
        if not table or START in table.values():
            raise OrchestrationBuildError(
                f"the router of {source!r} needs routes, none of them to START", nodes=[source]
            )
        self._routers[source] = RouterSpec(router, MappingProxyType(table))
        return self

    def add_join(self, sources: Sequence[str], target: str) -> GraphBuilder:
        """Run ``target`` once every one of ``sources`` has finished since ``target`` last ran."""
        unique = tuple(dict.fromkeys(sources))
        if not unique or len(unique) != len(sources):
            raise OrchestrationBuildError(f"a join needs distinct sources, got {list(sources)!r}")
        if target in (START, END) or START in unique or END in unique:
            raise OrchestrationBuildError("a join connects nodes, not START or END")
        self._joins.append(Join(unique, target))
        return self

    def build(self) -> Graph:
        """Check the definition and freeze it.

        Raises:
            OrchestrationBuildError: An edge, route, join or destination names a node that does
                not exist; there is no entry; a node has no way out; or a node is unreachable.
                The error's ``nodes`` lists the culprits.
        """
        known = set(self._nodes)
        references: list[str] = []
        for source, targets in self._edges.items():
            references += [source, *targets]
        for source, router in self._routers.items():
            references += [source, *router.routes.values()]
        for join in self._joins:
            references += [*join.sources, join.target]
        for spec in self._nodes.values():
            references += spec.destinations
        missing = sorted({name for name in references if name not in known | {START, END}})
        if missing:
            raise OrchestrationBuildError(
                f"graph {self.name!r} refers to missing node(s): {', '.join(missing)}",
                nodes=missing,
            )
        if START in (dest for spec in self._nodes.values() for dest in spec.destinations):
            raise OrchestrationBuildError("a node cannot route to START")
        successors = self._successors()
        if not successors.get(START):
            raise OrchestrationBuildError(
                f"graph {self.name!r} has no entry: add_edge(START, <first node>)"
            )
        stuck = [name for name in self._nodes if not successors.get(name)]
        if stuck:
            raise OrchestrationBuildError(
                f"node(s) with no way out: {', '.join(stuck)}; add an edge (to END to finish), "
                "a router, a join or destinations",
                nodes=stuck,
            )
        reachable = _reachable(successors)
        unreachable = [name for name in self._nodes if name not in reachable]
        if unreachable:
            raise OrchestrationBuildError(
                f"node(s) unreachable from START: {', '.join(unreachable)}", nodes=unreachable
            )
        return Graph(
            GraphSpec(
                name=self.name,
                nodes=MappingProxyType(dict(self._nodes)),
                edges=MappingProxyType({k: tuple(v) for k, v in self._edges.items()}),
                routers=MappingProxyType(dict(self._routers)),
                joins=tuple(self._joins),
                reducers=MappingProxyType(dict(self._reducers)),
            )
        )

    def _successors(self) -> dict[str, set[str]]:
        successors: dict[str, set[str]] = {}
        for source, targets in self._edges.items():
            successors.setdefault(source, set()).update(targets)
        for source, router in self._routers.items():
            successors.setdefault(source, set()).update(router.routes.values())
        for join in self._joins:
            for source in join.sources:
                successors.setdefault(source, set()).add(join.target)
        for name, spec in self._nodes.items():
            successors.setdefault(name, set()).update(spec.destinations)
        return successors


def _reachable(successors: Mapping[str, set[str]]) -> set[str]:
    seen = {START}
    stack = [START]
    while stack:
        for target in successors.get(stack.pop(), ()):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


class Graph(PromptsAsFlow):
    """A checked graph, built by :class:`GraphBuilder`. Holds no run state: run it concurrently."""

    __slots__ = ("spec",)

    def __init__(self, spec: GraphSpec) -> None:
        self.spec = spec

    def __repr__(self) -> str:
        return f"Graph({self.spec.name!r}, nodes={list(self.spec.nodes)})"

    @property
    def name(self) -> str:
        """The graph's name."""
        return self.spec.name

    async def run(
        self,
        state: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        checkpoint: Checkpoint | None = None,
        cancel: CancelToken | None = None,
        max_steps: int = 25,
        on_node: NodeObserver | None = None,
        on_agent_event: NodeAgentObserver | None = None,
    ) -> GraphResult:
        """Run from ``state`` until no node is left to run.

        With ``checkpoint`` (and ``run_id``) the run is saved after every superstep, and when the
        run already has a checkpoint it resumes from it: ``state`` is then ignored, finished
        supersteps are not run again, and a finished run returns its final state at once. State
        values must then be JSON values. With a store that leases runs (every daimon store), the
        run holds its lease as an agent run does: taken before the checkpoint is loaded, renewed
        every third of its length, given up when the run ends or fails; once it ended and another
        runner took it over, this run's saves are refused.

        ``on_node`` is told each node's start, end (with its duration) or failure, as they
        happen, with the superstep (see :data:`NodeEvent`); routers report nothing.
        ``on_agent_event`` is told every stream event of each agent a node prompts through
        ``ctx.prompt`` (streamed for it), wrapped in a :class:`NodeAgentEvent`.

        Raises:
            RunCancelled: ``cancel`` was cancelled (checked before each superstep; running nodes
                are cancelled, and the nodes that had finished are kept in the checkpoint).
            NodeError: A node or a router raised.
            MaxStepsError: ``max_steps`` supersteps ran and nodes were still scheduled.
            StateConflictError: Parallel nodes wrote a key that has no reducer.
            OrchestrationError: A node routed to a node that is not one of its destinations, a
                router picked an unknown route, or the checkpoint is not this graph's.
            RunLeasedError: Another runner holds the run's live lease (before any node runs).
            CheckpointConflictError: This process already runs ``run_id`` with this store, or
                the run's lease ended and another runner took the run over.
        """
        return await run_graph(
            self.spec,
            state,
            run_id=run_id,
            checkpoint=checkpoint,
            cancel=cancel,
            max_steps=max_steps,
            on_node=on_node,
            on_agent_event=on_agent_event,
        )

    def edges(self) -> list[_drawing.Edge]:
        """Every arrow of the graph, for drawings: routes are labelled, destinations dashed."""
        spec = self.spec
        edges: list[_drawing.Edge] = []
        for source in (START, *spec.nodes):
            edges += [_drawing.Edge(source, target) for target in spec.edges.get(source, ())]
            router = spec.routers.get(source)
            if router is not None:
                edges += [_drawing.Edge(source, t, label) for label, t in router.routes.items()]
            if source in spec.nodes:
                destinations = spec.nodes[source].destinations
                edges += [_drawing.Edge(source, t, dashed=True) for t in destinations]
        for join in spec.joins:
            edges += [_drawing.Edge(source, join.target, "join") for source in join.sources]
        return edges

    def to_mermaid(self) -> str:
        """The graph as a Mermaid flowchart."""
        return _drawing.mermaid(list(self.spec.nodes), self.edges())

    def to_text(self) -> str:
        """The graph as a plain-text listing of nodes and edges (with route labels)."""
        return _drawing.text("graph", self.spec.name, list(self.spec.nodes), self.edges())
