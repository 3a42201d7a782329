"""HandoffNetwork: agents that hand the conversation to one another."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from daimon.agent import Agent
from daimon.core import (
    AgentResponse,
    BuilderError,
    CancelToken,
    DaimonError,
    Done,
    Memory,
    Message,
    OrchestrationError,
    StreamEvent,
    ToolOutput,
    Usage,
)
from daimon.multiagent._history import HistoryFilter, text_only
from daimon.tools import EndRun, RunContext

__all__ = (
    "HANDOFF_PREFIX",
    "Handoff",
    "HandoffNetwork",
    "HandoffResult",
    "MaxHandoffsError",
)

HANDOFF_PREFIX = "transfer_to_"
"""Handoff tools are named ``transfer_to_<agent>``: a ``ToolResult`` of one marks a handoff."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Handoff:
    """One agent handing the conversation to another."""

    source: str
    """The agent that handed off."""
    target: str
    """The agent that took over."""
    reason: str
    """Why, in the handing agent's words."""
    kind: Literal["handoff"] = field(default="handoff", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class HandoffResult:
    """The ``output`` of a network's response: who answered, their output, and the handoffs."""

    agent: str
    """The name of the agent that gave the final answer."""
    output: Any = None
    """That agent's typed output, when it has an ``output_type`` (else ``None``)."""
    handoffs: tuple[Handoff, ...] = ()
    """Every handoff of the turn, in order."""
    kind: Literal["handoff_result"] = field(default="handoff_result", init=False, repr=False)


class MaxHandoffsError(OrchestrationError):
    """A turn of a :class:`HandoffNetwork` tried to hand off more than ``max_handoffs`` times."""

    def __init__(self, max_handoffs: int, handoffs: Sequence[Handoff]) -> None:
        path = " -> ".join([handoffs[0].source, *(h.target for h in handoffs)]) if handoffs else ""
        super().__init__(f"max handoffs ({max_handoffs}) exceeded: {path}")
        self.max_handoffs = max_handoffs
        self.handoffs = tuple(handoffs)
        """The handoffs of the turn, the refused one last."""


class HandoffNetwork:
    """Agents that pass the conversation to one another, each answering the user in turn.

    Every agent gets one tool per agent it may hand off to, ``transfer_to_<name>(reason)``
    (``routes`` says which; by default every agent may hand off to every other). Calling one ends
    that agent's run (through :class:`~daimon.tools.EndRun`), and the named agent takes over: it
    sees the conversation so far passed through ``history_filter`` (by default
    :func:`~daimon.multiagent.text_only`: user and assistant text, without tool internals),
    then a user-role note saying who handed over and why, and it answers (or hands off again).
    A call to a handoff tool that does not exist gets the usual unknown-tool error, which lists
    the tools there are.

    The agents you give are never changed: the network runs copies of them, taken when it is
    built, with the same configuration plus the handoff tools (change an agent afterwards and the
    network does not see it). Each agent's own limits (``max_iterations``, ``max_budget``) apply
    to its part of the turn; deps and the cancel token reach every agent.

    Usage, cost and iterations of the response are summed over every agent of the turn; its
    ``output`` is a :class:`HandoffResult` naming the agent that answered, carrying that agent's
    typed output and the turn's handoffs. Its ``messages`` hold the whole turn: the prompt, each
    agent's turns and each handoff note.

    With a ``session_id``, the conversation is kept in ``memory`` (by default the start agent's
    memory), and later turns see it (through the history filter). A turn starts with ``start``
    unless ``agent`` names another: pass ``agent=response.output.agent`` to let the agent that
    answered last carry on.

    Streaming yields each agent's events in turn, then one ``Done`` with the network's response;
    a handoff shows as the ``ToolResult`` of a tool whose name starts with
    :data:`HANDOFF_PREFIX`.

    A network is a :class:`~daimon.core.protocols.Promptable`: every front end (``daimon serve``,
    the worker, MCP, A2A, :class:`~daimon.multiagent.AgentTool`) serves it. ``history`` given to
    a prompt is the conversation so far (instead of a session's); ``instructions`` reach every
    agent of the turn.

    Limitations: a run of the network cannot pause for approvals (an agent that stops for one
    raises :class:`~daimon.core.ApprovalRequiredError`, which every front end maps as it maps
    a paused run), and it is not resumable from checkpoints as a whole. Without a
    ``session_id``, the tools of an agent that took over see the network run's id as
    ``ctx.session_id`` (the history reaches the agent through a session).

    Args:
        agents: The agents, by name; a name must fit in a tool name (letters, digits, ``_``,
            ``-``).
        start: The agent that answers first.
        routes: Who may hand off to whom: ``{"triage": ["billing", "tech"], "billing":
            ["triage"]}``; an agent missing from it hands off to nobody. Default: all to all.
        descriptions: What each agent handles, by name, shown in the handoff tools.
        history_filter: What of the conversation so far the next agent sees.
        max_handoffs: Handoffs allowed in one turn; one more raises :class:`MaxHandoffsError`.
        memory: Where sessions are kept; by default the start agent's memory.
        name: The network's name, as servers and tools show it.

    Raises:
        BuilderError: An unknown or invalid name, a self-route, a negative ``max_handoffs``, a
            value that is not an Agent, or an agent that already has a tool named like a
            handoff tool.

    Example::

        network = HandoffNetwork(
            {"triage": triage, "billing": billing, "tech": tech}, start="triage"
        )
        response = await network.prompt("I was charged twice")
        print(response.output.agent, response.text)
    """

    __slots__ = (
        "_agents",
        "_filter",
        "_memory",
        "_prepared",
        "max_handoffs",
        "name",
        "routes",
        "start",
    )

    name: str
    """The network's name."""

    start: str
    """The agent that answers first."""
    routes: Mapping[str, tuple[str, ...]]
    """Whom each agent may hand off to."""
    max_handoffs: int
    """Handoffs allowed in one turn."""

    def __init__(
        self,
        agents: Mapping[str, Agent],
        *,
        start: str,
        routes: Mapping[str, Iterable[str]] | None = None,
        descriptions: Mapping[str, str] | None = None,
        history_filter: HistoryFilter | None = None,
        max_handoffs: int = 5,
        memory: Memory | None = None,
        name: str = "handoffs",
    ) -> None:
        if not isinstance(agents, Mapping) or not agents:
            raise BuilderError("HandoffNetwork needs a mapping of at least one agent by name")
        for key, agent in agents.items():
            if not isinstance(key, str) or _TOOL_NAME.fullmatch(HANDOFF_PREFIX + key) is None:
                raise BuilderError(
                    f"agent name {key!r} does not fit in a tool name: use letters, digits, '_' "
                    f"or '-', at most {64 - len(HANDOFF_PREFIX)} characters"
                )
            if not isinstance(agent, Agent):
                raise BuilderError(f"agent {key!r} is a {type(agent).__name__}, not an Agent")
        if start not in agents:
            raise BuilderError(f"start agent {start!r} is not one of: {', '.join(agents)}")
        if type(max_handoffs) is not int or max_handoffs < 0:
            raise BuilderError(f"max_handoffs must be a non-negative integer, got {max_handoffs!r}")
        if history_filter is not None and not callable(history_filter):
            raise BuilderError("history_filter must be a function of the messages")
        described = dict(descriptions or {})
        unknown = sorted(set(described) - set(agents))
        if unknown:
            raise BuilderError(f"descriptions name unknown agents: {', '.join(unknown)}")
        self._agents = dict(agents)
        self.name = name
        self.start = start
        self.routes = _routes(agents, routes)
        self.max_handoffs = max_handoffs
        self._filter: HistoryFilter = history_filter or text_only
        self._memory = memory
        self._prepared = {
            key: _with_tools(
                agent,
                [_TransferTool(target, described.get(target, "")) for target in self.routes[key]],
            )
            for key, agent in agents.items()
        }

    def __repr__(self) -> str:
        return f"HandoffNetwork(agents={list(self._agents)!r}, start={self.start!r})"

    @property
    def memory(self) -> Memory:
        """Where sessions are kept: the memory given, else the start agent's."""
        return self._memory if self._memory is not None else self._agents[self.start].memory

    @property
    def agents(self) -> Mapping[str, Agent]:
        """The agents as given, by name (the network runs copies with handoff tools added)."""
        return dict(self._agents)

    async def prompt(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        agent: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse:
        """Run the network until an agent answers without handing off.

        Args:
            input: The user's message.
            session_id: Continue (and keep) this conversation in the network's memory.
            history: The conversation so far, given directly (not with ``session_id``).
            instructions: Added to every agent's system prompt for this turn.
            run_id: The turn's id (a new one by default).
            agent: The agent that takes this turn first; default ``start``.
            deps: Dependencies for every agent's tools.
            cancel: Cancels the run, whichever agent is answering.

        Raises:
            MaxHandoffsError: The agents handed off more than ``max_handoffs`` times.
            ApprovalRequiredError: An agent paused for approvals.
            ValueError: ``agent`` is not one of the network's agents.
            BuilderError: Both ``history`` and ``session_id`` were given.
        """
        response: AgentResponse | None = None
        turn = _Turn(session_id, history, instructions, run_id, deps, cancel)
        async for event in self._run(input, turn, stream=False, agent=agent):
            if type(event) is Done:
                response = event.response
        if response is None:  # pragma: no cover - the run always ends with Done or raises
            raise DaimonError("the network ended without a response")
        return response

    def prompt_stream(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        agent: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run the network, streaming every agent's events; the last is ``Done``.

        Only the network's own ``Done`` (carrying its response) is yielded, not the ones that end
        each agent's part. Arguments as for :meth:`prompt`.
        """
        turn = _Turn(session_id, history, instructions, run_id, deps, cancel)
        return self._run(input, turn, stream=True, agent=agent)

    async def _run(
        self, input: str | Message, options: _Turn, *, stream: bool, agent: str | None
    ) -> AsyncGenerator[StreamEvent, None]:
        current = self.start if agent is None else agent
        if current not in self._prepared:
            raise ValueError(f"no agent {current!r} in the network; the agents are: {self._names}")
        session_id, deps, cancel = options.session_id, options.deps, options.cancel
        memory, history = await self._conversation(options)
        run_id = options.run_id or uuid.uuid4().hex
        turn: list[Message] = []
        handoffs: list[Handoff] = []
        usage = Usage()
        cost = 0.0
        iterations = 0
        prompt: str | Message = input
        while True:
            seen = list(self._filter([*history, *turn])) if history or turn else []
            runner = self._prepared[current]
            response: AgentResponse | None = None
            if stream:
                events = cast(
                    AsyncGenerator[StreamEvent, None],
                    runner.prompt_stream(
                        prompt,
                        history=seen,
                        instructions=options.instructions,
                        deps=deps,
                        cancel=cancel,
                    ),
                )
                async with contextlib.aclosing(events):
                    async for event in events:
                        if type(event) is Done:
                            response = event.response
                        else:
                            yield event
            else:
                response = await runner.prompt(
                    prompt,
                    history=seen,
                    instructions=options.instructions,
                    deps=deps,
                    cancel=cancel,
                )
            if response is None:  # pragma: no cover - an agent run always ends with Done
                raise OrchestrationError(f"agent {current!r} ended without a response")
            usage = usage + response.usage
            cost += response.cost
            iterations += response.iterations
            turn.extend(response.messages)
            response.require_finished(f"agent {current!r} of a HandoffNetwork")
            transfer = response.output
            if not isinstance(transfer, _Transfer):
                break
            handoff = Handoff(source=current, target=transfer.target, reason=transfer.reason)
            if len(handoffs) >= self.max_handoffs:
                raise MaxHandoffsError(self.max_handoffs, [*handoffs, handoff])
            handoffs.append(handoff)
            if cancel is not None:
                cancel.raise_if_cancelled()
            current = handoff.target
            prompt = Message.user(_note(handoff))
        if memory is not None and session_id is not None:
            await memory.add_messages(session_id, turn)
        yield Done(
            response=AgentResponse(
                text=response.text,
                messages=tuple(turn),
                iterations=iterations,
                usage=usage,
                cost=cost,
                run_id=run_id,
                session_id=session_id,
                output=HandoffResult(
                    agent=current, output=response.output, handoffs=tuple(handoffs)
                ),
            )
        )

    async def _conversation(self, options: _Turn) -> tuple[Memory | None, list[Message]]:
        """The memory a turn writes to (with a session) and the conversation so far."""
        if options.session_id is None:
            return None, list(options.history or ())
        if options.history is not None:
            raise BuilderError("give a turn history or a session_id, not both")
        return self.memory, list(await self.memory.get_messages(options.session_id))

    @property
    def _names(self) -> str:
        return ", ".join(repr(k) for k in self._agents)


@dataclass(frozen=True, slots=True)
class _Turn:
    """What one prompt of the network was given (internal)."""

    session_id: str | None
    history: Sequence[Message] | None
    instructions: str | None
    run_id: str | None
    deps: Any
    cancel: CancelToken | None


@dataclass(frozen=True, slots=True)
class _Transfer:
    """The output a handoff tool ends its agent's run with (internal)."""

    target: str
    reason: str


class _TransferTool:
    """``transfer_to_<target>(reason)``: ends the run, handing the conversation to ``target``."""

    __slots__ = ("description", "name", "parameters_schema", "target")

    def __init__(self, target: str, description: str) -> None:
        self.target = target
        self.name = HANDOFF_PREFIX + target
        what = f" ({description})" if description else ""
        self.description = (
            f"Hand the conversation over to the {target} agent{what}, who takes over from here "
            "and sees the conversation so far. Use it when the user's request is theirs to "
            "handle, not yours."
        )
        self.parameters_schema: Mapping[str, Any] = {
            "type": "object",
            "properties": {
                "reason": {
                    "type": "string",
                    "description": f"Why you hand over: what the user needs from {target}.",
                }
            },
            "required": ["reason"],
            "additionalProperties": False,
        }

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """End this agent's run with the handoff as its output."""
        reason = str(arguments.get("reason", ""))
        raise EndRun(_Transfer(self.target, reason), text=f"Transferred to {self.target}.")


def _note(handoff: Handoff) -> str:
    reason = handoff.reason.strip() or "(no reason given)"
    return (
        f"[handoff] The {handoff.source} agent handed this conversation over to you, the "
        f"{handoff.target} agent. Reason: {reason}\nTake over from here and reply to the user."
    )


def _routes(
    agents: Mapping[str, Agent], routes: Mapping[str, Iterable[str]] | None
) -> dict[str, tuple[str, ...]]:
    if routes is None:
        return {key: tuple(k for k in agents if k != key) for key in agents}
    unknown = sorted(set(routes) - set(agents))
    if unknown:
        raise BuilderError(f"routes name unknown agents: {', '.join(unknown)}")
    checked: dict[str, tuple[str, ...]] = {}
    for key in agents:
        given = routes.get(key, ())
        if isinstance(given, str):
            raise BuilderError(f"routes[{key!r}] must be a list of agent names, not a string")
        targets = tuple(dict.fromkeys(given))
        for target in targets:
            if target not in agents:
                raise BuilderError(f"agent {key!r} is routed to unknown agent {target!r}")
            if target == key:
                raise BuilderError(f"agent {key!r} is routed to itself")
        checked[key] = targets
    return checked


def _with_tools(agent: Agent, tools: Sequence[_TransferTool]) -> Agent:
    """A copy of ``agent`` with ``tools`` added; ``agent`` itself is left as it was."""
    return agent.replace(tools=[*agent.tools, *tools])  # DuplicateToolError on a name clash
