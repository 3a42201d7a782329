"""The agents a worker process serves, by task queue and name.

Workflows and activities look them up here: an agent's code never crosses Temporal, its name does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daimon.agent import Agent
from daimon.core.errors import BuilderError, DaimonError
from daimon.core.protocols import Promptable

__all__ = ("Served", "lookup", "register", "unregister")


@dataclass(frozen=True, slots=True)
class Served:
    """An agent as one worker serves it, with the worker's default ``deps`` for its tools."""

    agent: Promptable
    workflow_agent: Agent[Any, Any] | None
    """An agent as its workflow runs it (every call an activity); ``None`` for a team or flow,
    which runs whole in one activity."""
    deps: Any = None


_SERVED: dict[tuple[str, str], Served] = {}


def register(
    task_queue: str,
    agents: dict[str, Promptable],
    deps: Any,
    as_workflow: Callable[[Agent[Any, Any]], Agent[Any, Any]],
) -> None:
    """Serve ``agents`` on ``task_queue`` in this process (a second worker must agree)."""
    for name, agent in agents.items():
        known = _SERVED.get((task_queue, name))
        if known is not None and known.agent is not agent:
            raise BuilderError(
                f"task queue {task_queue!r} already serves another agent named {name!r} "
                "in this process"
            )
        as_agent = as_workflow(agent) if isinstance(agent, Agent) else None
        _SERVED[task_queue, name] = Served(agent, as_agent, deps)


def unregister(task_queue: str, names: list[str]) -> None:
    """Stop serving ``names`` on ``task_queue`` (a worker that shut down)."""
    for name in names:
        _SERVED.pop((task_queue, name), None)


def lookup(task_queue: str, name: str) -> Served:
    """The agent ``name`` served on ``task_queue``."""
    served = _SERVED.get((task_queue, name))
    if served is None:
        names = sorted(n for q, n in _SERVED if q == task_queue)
        raise DaimonError(
            f"no agent named {name!r} on task queue {task_queue!r} in this worker "
            f"(it serves: {', '.join(names) or 'none'})"
        )
    return served
