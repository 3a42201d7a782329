"""Node events: what a graph, DAG or workflow run tells an ``on_node`` observer, as it happens.

A run given ``on_node=`` calls it, synchronously and in order, with a :class:`NodeStarted` when a
node begins, then a :class:`NodeFinished` or :class:`NodeFailed`; a DAG or workflow run with
``on_error="isolate"`` also reports each :class:`NodeSkipped` node. A run given none pays
nothing: no event is built, no clock is read. The observer runs inside the run, so it should be
quick (append to a list, put on a queue); an exception it raises ends the run.

A run given ``on_agent_event=`` also streams each agent a node prompts through its context
(``await ctx.prompt(agent, text)``) and calls it with every stream event of that agent, wrapped
in a :class:`NodeAgentEvent` naming the node, between the node's start and its end. Without it,
agents are prompted as usual (``prompt``, not streamed) and nothing is wrapped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from daimon.core.events import StreamEvent

__all__ = (
    "NodeAgentEvent",
    "NodeAgentObserver",
    "NodeEvent",
    "NodeFailed",
    "NodeFinished",
    "NodeObserver",
    "NodeSkipped",
    "NodeStarted",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStarted:
    """A node began running."""

    node: str
    """The node's name."""
    step: int | None = None
    """The graph superstep it runs in (``None`` in DAGs and workflows)."""
    kind: Literal["node_started"] = field(default="node_started", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFinished:
    """A node returned."""

    node: str
    """The node's name."""
    seconds: float
    """How long it ran."""
    step: int | None = None
    """The graph superstep it ran in (``None`` in DAGs and workflows)."""
    kind: Literal["node_finished"] = field(default="node_finished", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFailed:
    """A node raised (a cancelled node reports nothing: the run raises ``RunCancelled``)."""

    node: str
    """The node's name."""
    seconds: float
    """How long it ran before it raised."""
    error: Exception
    """What it raised."""
    step: int | None = None
    """The graph superstep it ran in (``None`` in DAGs and workflows)."""
    kind: Literal["node_failed"] = field(default="node_failed", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSkipped:
    """A DAG or workflow node did not run because a predecessor failed (``on_error="isolate"``)."""

    node: str
    """The node's name."""
    kind: Literal["node_skipped"] = field(default="node_skipped", init=False, repr=False)


NodeEvent: TypeAlias = NodeStarted | NodeFinished | NodeFailed | NodeSkipped
"""One event of a node's life, told apart by ``kind``."""

NodeObserver: TypeAlias = Callable[[NodeEvent], object]
"""Called with each :data:`NodeEvent` of a run, as it happens (a plain function; not awaited)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeAgentEvent:
    """A stream event of an agent that a node prompted through its context (``ctx.prompt``)."""

    node: str
    """The node's name."""
    event: StreamEvent
    """The agent's event: text, tool calls and results, usage, and its ``Done`` last."""
    step: int | None = None
    """The graph superstep the node runs in (``None`` in DAGs and workflows)."""
    kind: Literal["node_event"] = field(default="node_event", init=False, repr=False)


NodeAgentObserver: TypeAlias = Callable[[NodeAgentEvent], object]
"""Called with each :class:`NodeAgentEvent` of a run, as it happens (a plain function)."""


def agent_teller(
    observer: NodeAgentObserver, node: str, step: int | None = None
) -> Callable[[StreamEvent], object]:
    """What a node's context calls with each event of an agent it prompts: ``observer``, wrapped."""

    def tell(event: StreamEvent) -> None:
        observer(NodeAgentEvent(node=node, event=event, step=step))

    return tell
