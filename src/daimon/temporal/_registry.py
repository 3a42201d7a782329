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
from daimon.multiagent import Supervisor

__all__ = ("Served", "lookup", "register", "served_name", "unregister")


@dataclass(frozen=True, slots=True)
class Served:
    """An agent as one worker serves it, with the worker's default ``deps`` for its tools."""

    agent: Promptable
    runner: Agent[Any, Any] | None
    """The Agent whose loop the workflow runs: the agent, or a Supervisor's own agent;
    ``None`` for another team or a flow, which runs whole in one activity."""
    workflow_agent: Agent[Any, Any] | None
    """``runner`` as its workflow runs it (every call an activity)."""
    deps: Any = None
    stream_tokens: bool = False
    """Whether its model calls stream, their text so far in their activity's heartbeats."""


_SERVED: dict[tuple[str, str], Served] = {}


def register(
    task_queue: str,
    agents: dict[str, Promptable],
    deps: Any,
    as_workflow: Callable[[Agent[Any, Any]], Agent[Any, Any]],
    stream_tokens: bool = False,
) -> None:
    """Serve ``agents`` on ``task_queue`` in this process (a second worker must agree)."""
    for name, agent in agents.items():
        known = _SERVED.get((task_queue, name))
        if known is not None and known.agent is not agent:
            raise BuilderError(
                f"task queue {task_queue!r} already serves another agent named {name!r} "
                "in this process"
            )
        runner = _runner(agent)
        as_agent = as_workflow(runner) if runner is not None else None
        _SERVED[task_queue, name] = Served(agent, runner, as_agent, deps, stream_tokens)


def _runner(agent: Promptable) -> Agent[Any, Any] | None:
    if isinstance(agent, Agent):
        return agent
    if isinstance(agent, Supervisor):  # its prompt is its agent's: the same loop
        return agent.agent
    return None


def unregister(task_queue: str, names: list[str]) -> None:
    """Stop serving ``names`` on ``task_queue`` (a worker that shut down)."""
    for name in names:
        _SERVED.pop((task_queue, name), None)


def served_name(task_queue: str, agent: object) -> str | None:
    """The name ``agent`` (that very object) is served under on ``task_queue``.

    ``None`` when it is not served there, or its runs cannot be workflows (not an Agent nor a
    Supervisor).
    """
    for (queue, name), served in _SERVED.items():
        if queue == task_queue and served.agent is agent and served.runner is not None:
            return name
    return None


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
