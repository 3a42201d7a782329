"""Client tools on the server's front ends: one rule for Chat Completions, Responses and AG-UI.

A request's function tools become the run's client tools (:meth:`daimon.Agent.prompt`'s
``client_tools``). A run that calls one pauses; the front end hands the calls to the client and
keeps the paused run (:class:`daimon._paused_runs.PausedRuns`, in the server's state store), under
each call's id, until the client sends the results back, to any replica sharing the store. A run
is kept ``keep_for`` seconds (the server's setting), and an in-memory store keeps only the newest
and none across a restart: a client that comes back after that gets a 400 naming the unknown
call id.

A request's ``tool_choice`` (Chat Completions, Responses) follows one rule too: the run is the
agent's with that ``tool_choice`` (:class:`daimon.Agent`'s), checked against the agent's tools
and the client's before it starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, ClientToolError
from daimon.core.messages import Message, Role
from daimon.core.protocols import Promptable
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolSpec

__all__ = (
    "BadToolChoice",
    "NoClientTools",
    "RunStart",
    "spec",
    "takes_client_tools",
    "text_with_calls",
    "with_tool_choice",
)

_NO_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


class NoClientTools(ValueError):
    """Tools were sent for a promptable that cannot take them (a flow, a team)."""


def spec(name: str, description: str | None, parameters: Mapping[str, Any] | None) -> ToolSpec:
    """A client tool's spec from a request's function tool (no parameters: takes none)."""
    return ToolSpec(
        name=name,
        description=description or "",
        parameters=_NO_PARAMETERS if parameters is None else parameters,
    )


def takes_client_tools(agent: Promptable, model: str, specs: Sequence[ToolSpec]) -> None:
    """Refuse client tools a run could not take, before it starts.

    Raises:
        NoClientTools: ``agent`` is not an :class:`~daimon.Agent` (a flow, a team), or a spec
            is malformed, given twice, or clashes with one of the agent's tools.
    """
    from daimon.agent import Agent

    if not isinstance(agent, Agent):
        raise NoClientTools(
            f"model {model!r} is not an agent (a flow or a team): it takes no client tools"
        )
    try:
        agent.check_client_tools(specs)
    except ClientToolError as exc:
        raise NoClientTools(str(exc)) from None


class BadToolChoice(ValueError):
    """A request's ``tool_choice`` the run could not honour (a 400 naming ``tool_choice``)."""


def with_tool_choice(
    agent: Promptable, model: str, choice: str | None, specs: Sequence[ToolSpec]
) -> Promptable:
    """``agent`` running with the request's ``tool_choice`` (``None``: as it is).

    Raises:
        BadToolChoice: ``agent`` is not an :class:`~daimon.Agent` (a flow, a team) and
            ``choice`` is not ``"auto"``, or the agent's tools and ``specs`` cannot honour it.
    """
    from daimon.agent import Agent

    if choice is None or (choice == "auto" and not isinstance(agent, Agent)):
        return agent
    if not isinstance(agent, Agent):
        raise BadToolChoice(
            f"model {model!r} is not an agent (a flow or a team): tool_choice can only be 'auto'"
        )
    try:
        chosen = agent if agent.tool_choice == choice else agent.replace(tool_choice=choice)
        chosen.check_tool_choice(specs)
    except BuilderError as exc:
        raise BadToolChoice(str(exc)) from None
    return chosen


def text_with_calls(response: AgentResponse[Any]) -> str:
    """What the model wrote beside the client calls it paused for."""
    for message in reversed(response.messages):
        if message.role is Role.ASSISTANT:
            return message.text
    return ""


@dataclass(frozen=True, slots=True)
class RunStart:
    """What one request asks: the prompt, the conversation before it, added instructions.

    A request answering client calls continues ``resumed`` with ``results`` instead.
    """

    prompt: str | Message
    history: list[Message]
    instructions: str | None
    client_tools: tuple[ToolSpec, ...] = ()
    resumed: AgentResponse | None = None
    results: dict[str, str] | None = None

    def events(self, agent: Promptable, run_id: str, token: CancelToken) -> Any:
        """The run's events, streamed (a new run, or the paused one continued)."""
        if self.resumed is not None:
            return agent.resume_stream(  # type: ignore[attr-defined]  # an Agent: checked
                self.resumed,
                results=self.results,
                client_tools=self.client_tools or None,
                cancel=token,
            )
        if self.client_tools:
            return agent.prompt_stream(  # type: ignore[call-arg]  # an Agent: checked
                self.prompt,
                history=self.history,
                instructions=self.instructions,
                run_id=run_id,
                cancel=token,
                client_tools=self.client_tools,
            )
        return agent.prompt_stream(
            self.prompt,
            history=self.history,
            instructions=self.instructions,
            run_id=run_id,
            cancel=token,
        )

    async def answer(self, agent: Promptable, run_id: str, token: CancelToken) -> AgentResponse:
        """The run's response (a new run, or the paused one continued)."""
        if self.resumed is not None:
            resumed: AgentResponse = await agent.resume(  # type: ignore[attr-defined]
                self.resumed,
                results=self.results,
                client_tools=self.client_tools or None,
                cancel=token,
            )
            return resumed
        if self.client_tools:
            return await agent.prompt(  # type: ignore[call-arg]  # an Agent: checked
                self.prompt,
                history=self.history,
                instructions=self.instructions,
                run_id=run_id,
                cancel=token,
                client_tools=self.client_tools,
            )
        return await agent.prompt(
            self.prompt,
            history=self.history,
            instructions=self.instructions,
            run_id=run_id,
            cancel=token,
        )
