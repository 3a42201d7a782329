"""Supervisor: one agent that routes work to named sub-agents through a ``delegate`` tool."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from daimon.agent import Agent, SystemPrompt
from daimon.core import (
    AgentResponse,
    ApprovalDecision,
    BuilderError,
    CancelToken,
    Memory,
    Message,
    Model,
    Promptable,
    StreamEvent,
    ToolOutput,
)
from daimon.multiagent._agent_tool import run_sub_agent
from daimon.tools import RunContext, Tool

__all__ = ("DELEGATE_TOOL", "Supervisor")

DELEGATE_TOOL = "delegate"
"""The name of the tool through which a supervisor hands a task to one of its agents."""

_DEFAULT_PROMPT = (
    "You lead a team of agents. Give each part of the task to the agent best suited to it by "
    f"calling {DELEGATE_TOOL} with the agent's name and a self-contained task: the agents do "
    "not see this conversation, so include everything they need. Independent tasks can be "
    "delegated at once, in one turn. When you have what you need, answer."
)


class Supervisor:
    """An agent that delegates tasks to named sub-agents and combines their answers.

    The supervisor is an :class:`~daimon.agent.Agent` (kept in :attr:`agent`) whose tools are a
    ``delegate(agent, task)`` tool, ``agent`` being one of the names in ``agents`` (an enum in the
    tool's schema), plus any ``tools`` of its own. Each delegation runs the sub-agent as an
    :class:`~daimon.multiagent.AgentTool` does: a fresh conversation on the task alone, with the
    supervisor run's deps and cancel token, spending from the supervisor's ``max_budget``, and its
    usage and cost added to the supervisor's. Several delegations in one model turn run
    concurrently. A delegation to an unknown agent, or one whose agent fails, gives the model an
    error result (naming the known agents, or the error) and the run goes on.

    With ``output_type``, the supervisor's final answer is typed (``response.output``), as for
    any agent: structured output and tools work together.

    A supervisor is a :class:`~daimon.core.protocols.Resumable` promptable: every front end
    serves it, and a run that pauses for an approval of one of its own ``tools`` is resumed with
    :meth:`resume` (a sub-agent cannot pause: its delegation answers an error). A sub-agent may
    be any promptable (an Agent, another Supervisor, a HandoffNetwork, a flow).

    Args:
        model: The supervisor's model (a Model or a model string).
        agents: The sub-agents, by the name the supervisor calls them.
        name: The supervisor agent's name.
        system_prompt: The supervisor's instructions; by default, how to delegate, followed by
            the team.
        descriptions: What each agent is good at, by name, for the supervisor's model.
        tools: More tools for the supervisor itself.
        max_iterations: Model calls the supervisor may make.
        output_type: A type for the supervisor's final answer.
        **options: Any other :class:`~daimon.agent.Agent` option (``cost_model``,
            ``max_budget``, ``memory``, ``hooks``, ``middleware``, ``temperature``, ...).

    Raises:
        BuilderError: No agents, a name that is not a non-empty string, an agent that is not
            promptable, a description for an unknown agent, or an invalid Agent option.

    Example::

        team = Supervisor(
            "openai:gpt-4o",
            {"researcher": researcher, "writer": writer},
            descriptions={"researcher": "finds sources", "writer": "writes prose"},
        )
        response = await team.prompt("Write a short report on owls")
    """

    __slots__ = ("agent", "agents")

    agent: Agent
    """The supervisor's own agent, with the ``delegate`` tool."""
    agents: Mapping[str, Promptable]
    """The sub-agents, by name."""

    def __init__(
        self,
        model: Model | str,
        agents: Mapping[str, Promptable],
        *,
        name: str = "supervisor",
        system_prompt: SystemPrompt = None,
        descriptions: Mapping[str, str] | None = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        max_iterations: int = 10,
        output_type: Any = None,
        **options: Any,
    ) -> None:
        team = _check_team(agents, descriptions)
        self.agents = dict(agents)
        roster = "\n".join(f"- {key}: {text}" if text else f"- {key}" for key, text in team.items())
        if system_prompt is None:
            system_prompt = f"{_DEFAULT_PROMPT}\n\nYour agents:\n{roster}"
        delegate = _DelegateTool(self.agents, roster)
        self.agent = Agent(
            model,
            name=name,
            system_prompt=system_prompt,
            tools=[delegate, *tools],
            max_iterations=max_iterations,
            output_type=output_type,
            **options,
        )

    def __repr__(self) -> str:
        return f"Supervisor(agents={list(self.agents)!r})"

    @property
    def name(self) -> str:
        """The supervisor agent's name."""
        return self.agent.name

    @property
    def memory(self) -> Memory:
        """Where the supervisor's sessions live (its agent's memory)."""
        return self.agent.memory

    async def prompt(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse:
        """Run the supervisor to its final answer (usage and cost include the sub-agents').

        Takes the arguments of :meth:`Agent.prompt <daimon.agent.Agent.prompt>`.
        """
        return await self.agent.prompt(
            input,
            session_id=session_id,
            history=history,
            instructions=instructions,
            run_id=run_id,
            deps=deps,
            cancel=cancel,
        )

    def prompt_stream(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run the supervisor, streaming its events (each delegation ends in a ``ToolResult``)."""
        return self.agent.prompt_stream(
            input,
            session_id=session_id,
            history=history,
            instructions=instructions,
            run_id=run_id,
            deps=deps,
            cancel=cancel,
        )

    async def resume(
        self,
        paused: AgentResponse | str,
        approvals: Mapping[str, ApprovalDecision | bool] | None = None,
        *,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse:
        """Continue a run paused for approvals, as :meth:`daimon.agent.Agent.resume` does."""
        return await self.agent.resume(paused, approvals, deps=deps, cancel=cancel)


class _DelegateTool:
    """``delegate(agent, task)``: runs the named sub-agent on the task."""

    __slots__ = ("_agents", "description", "name", "parameters_schema")

    def __init__(self, agents: Mapping[str, Promptable], roster: str) -> None:
        self._agents = agents
        self.name = DELEGATE_TOOL
        self.description = (
            "Give a task to one of your agents and get its answer. The agent sees only the "
            f"task, not this conversation.\nAgents:\n{roster}"
        )
        self.parameters_schema: Mapping[str, Any] = {
            "type": "object",
            "properties": {
                "agent": {
                    "type": "string",
                    "enum": list(agents),
                    "description": "The name of the agent to give the task to.",
                },
                "task": {
                    "type": "string",
                    "description": "The task, with everything the agent needs to know.",
                },
            },
            "required": ["agent", "task"],
            "additionalProperties": False,
        }

    def delegation(self, arguments: object) -> tuple[Promptable, str, str] | None:
        """The chosen agent, its name and the task, when ``arguments`` are valid; else ``None``.

        (What :meth:`AgentTool.delegation <daimon.multiagent.AgentTool.delegation>` gives.)
        """
        if not isinstance(arguments, dict) or set(arguments) != {"agent", "task"}:
            return None
        key, task = arguments["agent"], arguments["task"]
        if not isinstance(key, str) or key not in self._agents or not isinstance(task, str):
            return None
        return self._agents[key], key, task

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """Run the chosen agent on the task; unknown agents get an error naming the known ones."""
        key = arguments.get("agent")
        if not isinstance(key, str) or key not in self._agents:
            known = ", ".join(repr(k) for k in self._agents)
            return ToolOutput.error(f"Error: there is no agent {key!r}; the agents are: {known}")
        return await run_sub_agent(self._agents[key], key, str(arguments.get("task", "")), ctx)


def _check_team(
    agents: Mapping[str, Promptable], descriptions: Mapping[str, str] | None
) -> dict[str, str]:
    """Each agent's description by name, after checking the team; ``BuilderError`` if wrong."""
    if not isinstance(agents, Mapping) or not agents:
        raise BuilderError("Supervisor needs a mapping of at least one agent by name")
    for key, agent in agents.items():
        if not isinstance(key, str) or not key.strip():
            raise BuilderError(f"agent names must be non-empty strings, got {key!r}")
        if isinstance(agent, type) or not isinstance(agent, Promptable):
            raise BuilderError(
                f"agent {key!r} is a {type(agent).__name__}, not an Agent (nor promptable)"
            )
    described = dict(descriptions or {})
    unknown = sorted(set(described) - set(agents))
    if unknown:
        raise BuilderError(f"descriptions name unknown agents: {', '.join(unknown)}")
    return {key: described.get(key, "") for key in agents}
