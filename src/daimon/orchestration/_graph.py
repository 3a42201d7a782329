"""The vocabulary of graphs: node outcomes, the node's context, results and the frozen spec."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage
from daimon.orchestration._common import END, START, ContextBase, Tally
from daimon.orchestration._observe import NodeAgentObserver, agent_teller
from daimon.orchestration._reducers import Reducer

__all__ = (
    "END",
    "GraphContext",
    "GraphNode",
    "GraphResult",
    "GraphSpec",
    "Join",
    "NodeOutcome",
    "NodeResult",
    "NodeSpec",
    "Router",
    "RouterSpec",
    "START",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOutcome:
    """What a node returns when it both updates the state and picks where to go."""

    update: Mapping[str, Any] | None = None
    """State keys to write (merged through the keys' reducers)."""
    goto: str | Sequence[str] | None = None
    """The next node(s) instead of the node's edges; ``()`` ends this branch. Each must be one
    of the node's declared ``destinations``."""
    kind: Literal["node_outcome"] = field(default="node_outcome", init=False, repr=False)


class GraphContext(ContextBase):
    """What a graph node sees.

    Attributes:
        node: The node's name.
        state: The state as it was when the superstep began (read-only: return updates).
        step: The superstep's number, from 0.
        cancel: The run's cancel token, or ``None``.
    """

    __slots__ = ("node", "state", "step")

    def __init__(
        self,
        node: str,
        state: Mapping[str, Any],
        step: int,
        *,
        cancel: CancelToken | None = None,
        tally: Tally | None = None,
        on_agent_event: NodeAgentObserver | None = None,
    ) -> None:
        tell = None if on_agent_event is None else agent_teller(on_agent_event, node, step)
        super().__init__(cancel, tally if tally is not None else Tally(), tell)
        self.node = node
        self.state = state
        self.step = step


NodeResult: TypeAlias = NodeOutcome | Mapping[str, Any] | str | Sequence[str] | None
"""A node's result: a :class:`NodeOutcome`, a state update (a mapping), the next node's name,
several names (fan-out), or ``None`` (no update; follow the edges)."""

GraphNode: TypeAlias = Callable[[GraphContext], NodeResult | Awaitable[NodeResult]]
"""A node: a function (sync or async) of its :class:`GraphContext`."""

Router: TypeAlias = Callable[
    [Mapping[str, Any]], str | Sequence[str] | Awaitable[str | Sequence[str]]
]
"""Picks route label(s) from the state after the node's superstep (sync or async)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphResult:
    """What a graph run produced."""

    state: dict[str, Any]
    """The final state."""
    steps: int
    """Supersteps completed, counting those before a resume."""
    history: tuple[tuple[str, ...], ...]
    """The nodes of each superstep this call ran, in order."""
    usage: Usage
    """Tokens used by every agent of the run (resumed runs include the earlier part)."""
    cost: float
    """Dollars spent by every agent of the run."""
    resumed: bool = False
    """Whether the run continued from a checkpoint."""
    kind: Literal["graph_result"] = field(default="graph_result", init=False, repr=False)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node and where it may route itself."""

    fn: GraphNode
    destinations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """A router and its routes (label to node)."""

    fn: Router
    routes: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Join:
    """A node that runs once every source has finished since it last ran."""

    sources: tuple[str, ...]
    target: str


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """A validated graph definition, as the runner reads it."""

    name: str
    nodes: Mapping[str, NodeSpec]
    edges: Mapping[str, tuple[str, ...]]
    routers: Mapping[str, RouterSpec]
    joins: tuple[Join, ...]
    reducers: Mapping[str, Reducer]
