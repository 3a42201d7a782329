"""What every orchestration pattern shares: agents, usage roll-up, templates and calls."""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, TypeAlias, cast, runtime_checkable

from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage
from daimon.core.errors import OrchestrationError, PromptTemplateError
from daimon.core.events import Done, StreamEvent
from daimon.core.protocols import Promptable
from daimon.core.results import AgentResponse

__all__ = (
    "AgentCaller",
    "ContextBase",
    "END",
    "Promptable",
    "Renderable",
    "START",
    "StepTiming",
    "Tally",
    "agent_caller",
    "call",
    "callable_name",
    "render",
)

START: Final = "__start__"
"""A graph's entry (``add_edge(START, "first")``); in drawings, where workflow inputs come from."""
END: Final = "__end__"
"""A graph's exit (``add_edge("last", END)``); in drawings, where a workflow's results go."""


AgentCaller: TypeAlias = Callable[
    [Promptable, str, CancelToken | None], Awaitable[AgentResponse | None]
]
"""Runs an agent a node prompts, in place of ``ctx.prompt``; ``None``: not this one."""

agent_caller: ContextVar[AgentCaller | None] = ContextVar("daimon_agent_caller", default=None)
"""Set by a runner that takes over the agents a flow's nodes prompt (``daimon.temporal`` runs
each agent it serves as a workflow of its own); ``ctx.prompt`` asks it first."""


@runtime_checkable
class Renderable(Protocol):
    """A prompt template object, such as :class:`daimon.PromptTemplate`."""

    def render(self, **values: object) -> str:
        """The text with every placeholder filled in."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTiming:
    """How long one step or node took."""

    name: str
    seconds: float
    kind: Literal["step_timing"] = field(default="step_timing", init=False, repr=False)


class Tally:
    """Usage and cost summed over the agent responses of one run, each counted once."""

    __slots__ = ("_counted", "cost", "usage")

    def __init__(self, usage: Usage | None = None, cost: float = 0.0) -> None:
        self.usage = usage if usage is not None else Usage()
        self.cost = cost
        # By identity, holding each response so its id cannot be reused while the run lasts: a
        # node may both prompt through its context and return the response.
        self._counted: dict[int, AgentResponse] = {}

    def add(self, response: AgentResponse) -> None:
        """Count one response (again adding a response already counted does nothing)."""
        if id(response) in self._counted:
            return
        self._counted[id(response)] = response
        self.usage = self.usage + response.usage
        self.cost += response.cost

    def add_found(self, value: object) -> None:
        """Count ``value`` if it is a response, or the responses directly inside a mapping."""
        if isinstance(value, AgentResponse):
            self.add(value)
        elif isinstance(value, Mapping):
            for item in value.values():
                if isinstance(item, AgentResponse):
                    self.add(item)


class ContextBase:
    """The cancel token and usage roll-up a node or step sees."""

    __slots__ = ("_tally", "_tell", "cancel")

    def __init__(
        self,
        cancel: CancelToken | None,
        tally: Tally,
        tell: Callable[[StreamEvent], object] | None = None,
    ) -> None:
        self.cancel = cancel
        """The run's cancel token (``None`` when the run was given none)."""
        self._tally = tally
        # Told each stream event of the agents prompted here; ``None``: prompt them unstreamed.
        self._tell = tell

    @property
    def usage(self) -> Usage:
        """Tokens used so far by the whole run."""
        return self._tally.usage

    @property
    def cost(self) -> float:
        """Dollars spent so far by the whole run."""
        return self._tally.cost

    def record(self, response: AgentResponse) -> None:
        """Add a response's usage and cost to the run's totals (once, however often recorded)."""
        self._tally.add(response)

    async def prompt(self, agent: Promptable, text: str) -> AgentResponse:
        """Prompt ``agent`` with the run's cancel token, and count its usage and cost.

        An agent that pauses for approvals raises
        :class:`~daimon.core.errors.ApprovalRequiredError` (its usage counted first).

        When the run was given ``on_agent_event``, an agent with ``prompt_stream`` (such as
        :class:`daimon.Agent`) is streamed instead, and each of its events is reported.
        """
        tell = self._tell
        stream = getattr(agent, "prompt_stream", None) if tell is not None else None
        caller = agent_caller.get()
        taken = await caller(agent, text, self.cancel) if caller is not None else None
        if taken is not None:
            response = taken
        elif tell is None or not callable(stream):
            response = await agent.prompt(text, cancel=self.cancel)
        else:
            events = cast(AsyncIterator[StreamEvent], stream(text, cancel=self.cancel))
            response = await _drain(events, tell)
        self._tally.add(response)
        # A node cannot pause: a paused agent fails it, the one rule of callers that cannot ask.
        return response.require_finished("a flow's node")


async def _drain(
    events: AsyncIterator[StreamEvent], tell: Callable[[StreamEvent], object]
) -> AgentResponse:
    """Tell each event of an agent's stream, and return the response its ``Done`` carries."""
    response: AgentResponse | None = None
    try:
        async for event in events:
            tell(event)
            if isinstance(event, Done) and event.response is not None:
                response = event.response
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:  # an observer that raised leaves no agent run behind
            await close()
    if response is None:
        raise OrchestrationError("the agent's stream ended without a Done carrying its response")
    return response


_PLACEHOLDER = re.compile(r"(\\?)\{\{\s*([^{}]*?)\s*\}\}")


def render(template: str | Renderable, values: Mapping[str, object]) -> str:
    r"""Fill ``{{name}}`` placeholders from ``values`` (``\{{`` is a literal ``{{``).

    A template object (anything with ``render(**values)``) renders itself.

    Raises:
        PromptTemplateError: Some placeholders have no value; it names them all.
    """
    if not isinstance(template, str):
        return template.render(**values)
    missing = [
        match[2]
        for match in _PLACEHOLDER.finditer(template)
        if not match[1] and match[2] not in values
    ]
    if missing:
        raise PromptTemplateError(sorted(set(missing)))

    def fill(match: re.Match[str]) -> str:
        if match[1]:
            return match[0][1:]
        return str(values[match[2]])

    return _PLACEHOLDER.sub(fill, template)


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a sync or async function and return its result."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


def callable_name(fn: object) -> str:
    """A readable name for a function, method or callable object."""
    name = getattr(fn, "name", None)
    if isinstance(name, str) and name:
        return name
    name = getattr(fn, "__name__", None)
    if isinstance(name, str):
        return name
    return type(fn).__name__
