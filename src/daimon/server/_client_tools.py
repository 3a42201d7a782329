"""Client tools on the server's front ends: one rule for Chat Completions, Responses and AG-UI.

A request's function tools become the run's client tools (:meth:`daimon.Agent.prompt`'s
``client_tools``). A run that calls one pauses; the front end hands the calls to the client and
keeps the paused run here, under each call's id, until the client sends the results back. The
store is bounded: the oldest paused runs go first (a client that comes back after that gets a
400 naming the unknown call id, as it would after a restart).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daimon.core.cancel import CancelToken
from daimon.core.errors import ClientToolError
from daimon.core.messages import Message, Role
from daimon.core.protocols import Promptable
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolSpec

__all__ = (
    "KEPT_PAUSED_RUNS",
    "NoClientTools",
    "PausedRun",
    "PausedRuns",
    "RunStart",
    "UnknownCall",
    "spec",
    "takes_client_tools",
    "text_with_calls",
)

KEPT_PAUSED_RUNS = 1000
"""How many runs paused for client tools a front end keeps (the oldest go first)."""

_NO_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


class NoClientTools(ValueError):
    """Tools were sent for a promptable that cannot take them (a flow, a team)."""


class UnknownCall(ValueError):
    """A result names a call no kept run waits for."""

    def __init__(self, message: str, call_id: str) -> None:
        super().__init__(message)
        self.call_id = call_id


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


@dataclass(frozen=True, slots=True)
class PausedRun:
    """A run waiting for client results, and which served promptable it belongs to."""

    model: str
    response: AgentResponse[Any]
    key: str = ""
    """What else the front end keys it by (a response id, a thread id), if anything."""


class PausedRuns:
    """Runs paused for client tools, by call id (and by the front end's own key)."""

    __slots__ = ("_by_call", "_by_key", "_runs", "limit")

    def __init__(self, limit: int = KEPT_PAUSED_RUNS) -> None:
        self.limit = limit
        self._runs: OrderedDict[int, PausedRun] = OrderedDict()
        self._by_call: dict[str, PausedRun] = {}
        self._by_key: dict[str, PausedRun] = {}

    def keep(self, model: str, response: AgentResponse[Any], key: str = "") -> PausedRun:
        """Keep a paused run until its client calls are answered (or it is the oldest)."""
        paused = PausedRun(model, response, key)
        self._runs[id(paused)] = paused
        for call in response.client_calls:
            self._by_call[call.id] = paused
        if key:
            self._by_key[key] = paused
        while len(self._runs) > self.limit:
            self._drop(next(iter(self._runs.values())))
        return paused

    def by_key(self, key: str) -> PausedRun | None:
        """The paused run kept under the front end's ``key``."""
        return self._by_key.get(key)

    def take(self, model: str, results: Iterable[str], where: Sequence[str] = ()) -> PausedRun:
        """The run waiting for the calls ``results`` answers, no longer kept.

        Raises:
            UnknownCall: A call id no kept run of ``model`` waits for, or ids of two runs.
        """
        found: PausedRun | None = None
        for index, call_id in enumerate(results):
            paused = self._by_call.get(call_id)
            if paused is None or paused.model != model or (found and paused is not found):
                at = f" ({where[index]})" if index < len(where) else ""
                raise UnknownCall(
                    f"no paused run of {model!r} waits for tool call {call_id!r}{at}: it was "
                    "answered already, is unknown, or expired",
                    call_id,
                )
            found = paused
        if found is None:
            raise UnknownCall("no tool results were given", "")
        self._drop(found)
        return found

    def _drop(self, paused: PausedRun) -> None:
        self._runs.pop(id(paused), None)
        for call in paused.response.client_calls:
            if self._by_call.get(call.id) is paused:
                del self._by_call[call.id]
        if paused.key and self._by_key.get(paused.key) is paused:
            del self._by_key[paused.key]
