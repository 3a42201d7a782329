"""DagBuilder and Dag: nodes with dependencies, checked when built, run in parallel."""

from __future__ import annotations

import heapq
import inspect
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError
from daimon.orchestration import _drawing
from daimon.orchestration._errors import OrchestrationBuildError
from daimon.orchestration._flow_prompt import PromptsAsFlow
from daimon.orchestration._observe import NodeAgentObserver, NodeObserver
from daimon.orchestration._scheduler import DagNodeSpec, DagResult, OnError, execute

__all__ = ("Dag", "DagBuilder", "check_run_options", "takes_context", "topological_order")


def takes_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` has a second positional parameter, for the :class:`NodeContext`."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return True
    return sum(1 for p in parameters if p.kind in positional) >= 2


def topological_order(dependencies: Mapping[str, Sequence[str]], what: str) -> tuple[str, ...]:
    """The nodes, each after its dependencies; of the nodes ready, the first defined goes first.

    Raises:
        OrchestrationBuildError: A dependency is missing, or there is a cycle (it names the
            nodes of one cycle, in order).
    """
    for name, depends_on in dependencies.items():
        missing = [d for d in depends_on if d not in dependencies]
        if missing:
            raise OrchestrationBuildError(
                f"{what} node {name!r} depends on missing node(s): {', '.join(missing)}",
                nodes=missing,
            )
    waiting = {name: len(depends_on) for name, depends_on in dependencies.items()}
    successors: dict[str, list[str]] = {name: [] for name in dependencies}
    for name, depends_on in dependencies.items():
        for dependency in depends_on:
            successors[dependency].append(name)
    position = {name: index for index, name in enumerate(dependencies)}
    order: list[str] = []
    ready = [(position[name], name) for name in dependencies if not waiting[name]]
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for successor in successors[name]:
            waiting[successor] -= 1
            if not waiting[successor]:
                heapq.heappush(ready, (position[successor], successor))
    if len(order) < len(dependencies):
        cycle = _find_cycle({n: d for n, d in dependencies.items() if n not in order})
        raise OrchestrationBuildError(
            f"{what} has a cycle: {' -> '.join((*cycle, cycle[0]))}", nodes=cycle
        )
    return tuple(order)


def _find_cycle(dependencies: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle among nodes that all sit on or behind a cycle, dependencies first."""
    path: list[str] = []
    on_path: dict[str, int] = {}
    node = next(iter(dependencies))
    while node not in on_path:
        on_path[node] = len(path)
        path.append(node)
        node = next(d for d in dependencies[node] if d in dependencies)
    return list(reversed(path[on_path[node] :]))


def check_run_options(on_error: str, max_concurrency: int | None) -> None:
    """Raise :class:`BuilderError` for a bad failure policy or concurrency limit."""
    if on_error not in ("cancel", "isolate"):
        raise BuilderError(f'on_error must be "cancel" or "isolate", got {on_error!r}')
    if max_concurrency is not None and (type(max_concurrency) is not int or max_concurrency < 1):
        raise BuilderError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")


class DagBuilder:
    """Defines a DAG; :meth:`build` checks it and returns a runnable :class:`Dag`.

    A node is a function (sync or async) of one argument: a dict of its predecessors' outputs by
    name; a node without dependencies gets the run's inputs instead. A function with a second
    positional parameter also gets a :class:`NodeContext` (cancel token, run inputs, and
    ``prompt`` to call agents with usage roll-up). Agent responses it returns are counted.
    """

    def __init__(self, name: str = "dag") -> None:
        self.name = name
        self._nodes: dict[str, DagNodeSpec] = {}

    def add_node(
        self, name: str, fn: Callable[..., Any], *, depends_on: Sequence[str] = ()
    ) -> DagBuilder:
        """Add a node that runs once every node in ``depends_on`` has finished.

        Raises:
            OrchestrationBuildError: The name is taken or empty, or ``fn`` is not callable.
        """
        if not isinstance(name, str) or not name:
            raise OrchestrationBuildError(f"a node name must be a non-empty string, got {name!r}")
        if name in self._nodes:
            raise OrchestrationBuildError(f"duplicate node {name!r}", nodes=[name])
        if not callable(fn):
            raise OrchestrationBuildError(f"node {name!r} is not callable", nodes=[name])
        if isinstance(depends_on, str):
            depends_on = (depends_on,)
        self._nodes[name] = DagNodeSpec(fn, tuple(dict.fromkeys(depends_on)), takes_context(fn))
        return self

    def build(self) -> Dag:
        """Check the definition and freeze it.

        Raises:
            OrchestrationBuildError: There are no nodes, a dependency is missing (named), or
                there is a cycle (its nodes are named, in order).
        """
        if not self._nodes:
            raise OrchestrationBuildError(f"dag {self.name!r} has no nodes")
        order = topological_order(
            {name: spec.depends_on for name, spec in self._nodes.items()}, f"dag {self.name!r}"
        )
        return Dag(self.name, MappingProxyType(dict(self._nodes)), order)


class Dag(PromptsAsFlow):
    """A checked DAG, built by :class:`DagBuilder`. Holds no run state: run it concurrently."""

    __slots__ = ("name", "nodes", "order")

    def __init__(self, name: str, nodes: Mapping[str, DagNodeSpec], order: tuple[str, ...]) -> None:
        self.name = name
        self.nodes = nodes
        self.order = order
        """The nodes, each after its dependencies."""

    def __repr__(self) -> str:
        return f"Dag({self.name!r}, nodes={list(self.order)})"

    async def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        cancel: CancelToken | None = None,
        on_error: OnError = "cancel",
        max_concurrency: int | None = None,
        on_node: NodeObserver | None = None,
        on_agent_event: NodeAgentObserver | None = None,
    ) -> DagResult:
        """Run every node, each as soon as its dependencies are done, independent ones in parallel.

        Args:
            inputs: What nodes without dependencies receive (and every node's ``ctx.run_inputs``).
            cancel: Cancels the run: running nodes are cancelled and awaited, then
                :class:`RunCancelled` is raised; no node is left running.
            on_error: ``"cancel"`` (default): the first failure cancels every running node and
                raises :class:`NodeError`. ``"isolate"``: the failing node's descendants are
                skipped, the other branches finish, and the result lists failed and skipped nodes.
            max_concurrency: At most this many nodes run at once.
            on_node: Told each node's start, end (with its duration), failure or skip, as they
                happen (see :data:`NodeEvent`).
            on_agent_event: Told every stream event of each agent a node prompts through its
                context (``ctx.prompt``, streamed for it), wrapped in a :class:`NodeAgentEvent`.
        """
        check_run_options(on_error, max_concurrency)
        return await execute(
            self.nodes,
            self.order,
            inputs or {},
            cancel=cancel,
            on_error=on_error,
            max_concurrency=max_concurrency,
            on_node=on_node,
            on_agent_event=on_agent_event,
        )

    def edges(self) -> list[_drawing.Edge]:
        """Every dependency, as an arrow from the dependency to the node."""
        return [
            _drawing.Edge(dependency, name)
            for name in self.order
            for dependency in self.nodes[name].depends_on
        ]

    def to_mermaid(self) -> str:
        """The DAG as a Mermaid flowchart."""
        return _drawing.mermaid(list(self.order), self.edges())

    def to_text(self) -> str:
        """The DAG as a plain-text listing of nodes and edges."""
        return _drawing.text("dag", self.name, list(self.order), self.edges())
