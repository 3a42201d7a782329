"""Orchestration errors, each with typed fields.

They extend :class:`~daimon.core.errors.OrchestrationError`::

    OrchestrationError (daimon.core)
    ├── OrchestrationBuildError       an orchestration is defined wrongly (a BuilderError)
    │   └── WiringError               a workflow field has no producer, several, or the wrong type
    ├── NodeError                     a node, step or router raised; the cause is chained
    ├── MaxStepsError                 a graph ran more supersteps than ``max_steps``
    └── StateConflictError            parallel nodes wrote one key that has no reducer

A build error is also a :class:`~daimon.core.errors.BuilderError`: it is the developer's mistake,
found by ``build()`` before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from daimon.core.errors import BuilderError, OrchestrationError

__all__ = (
    "MaxStepsError",
    "NodeError",
    "OrchestrationBuildError",
    "StateConflictError",
    "WiringError",
)


class OrchestrationBuildError(OrchestrationError, BuilderError):
    """A chain, graph, DAG or workflow is defined wrongly; raised when it is built.

    Attributes:
        nodes: The nodes involved (the nodes of a cycle, a missing or duplicate node, ...).
    """

    def __init__(self, message: str, *, nodes: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.nodes = tuple(nodes)


class WiringError(OrchestrationBuildError):
    """A workflow input field has no producer, several producers, or a producer of the wrong type.

    Attributes:
        field: The field.
        consumers: The nodes that read it.
        producers: The nodes that write it (none, or several); ``"<input>"`` stands for the
            workflow's declared inputs.
    """

    def __init__(
        self, message: str, *, field: str, consumers: Sequence[str], producers: Sequence[str]
    ) -> None:
        super().__init__(message, nodes=(*consumers, *producers))
        self.field = field
        self.consumers = tuple(consumers)
        self.producers = tuple(producers)


class NodeError(OrchestrationError):
    """A node (or chain step, or router) raised; the original error is ``__cause__``.

    Attributes:
        node: The node's name.
    """

    def __init__(self, node: str, error: BaseException, *, what: str = "node") -> None:
        detail = str(error) or type(error).__name__
        super().__init__(f"{what} {node!r} failed: {type(error).__name__}: {detail}")
        self.node = node


class MaxStepsError(OrchestrationError):
    """A graph ran ``max_steps`` supersteps and still had nodes to run.

    Attributes:
        max_steps: The limit.
        last_nodes: The nodes of the last superstep that ran.
        next_nodes: The nodes that would have run next.
    """

    def __init__(
        self, max_steps: int, last_nodes: Sequence[str], next_nodes: Sequence[str]
    ) -> None:
        super().__init__(
            f"graph exceeded max_steps={max_steps} after {max_steps} supersteps; last nodes: "
            f"{', '.join(last_nodes) or 'none'}; next: {', '.join(next_nodes)}"
        )
        self.max_steps = max_steps
        self.last_nodes = tuple(last_nodes)
        self.next_nodes = tuple(next_nodes)


class StateConflictError(OrchestrationError):
    """Several nodes of one superstep wrote a state key that has no reducer.

    Attributes:
        key: The state key.
        nodes: The nodes that wrote it.
        step: The superstep.
    """

    def __init__(self, key: str, nodes: Sequence[str], step: int) -> None:
        super().__init__(
            f"state key {key!r} was written by {len(nodes)} parallel nodes at step {step} "
            f"({', '.join(nodes)}) and has no reducer: give it one, e.g. reducers={{{key!r}: "
            "append}"
        )
        self.key = key
        self.nodes = tuple(nodes)
        self.step = step
