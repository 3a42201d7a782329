"""RunContext: the one per-run context that tools, hooks, middleware and extensions all see.

A run owns one :class:`RunContext`. Its hooks, middleware, extensions and system-prompt
functions get that object; each tool call gets a view of it (:meth:`RunContext.for_call`) that
reads and writes every run-level field through to the run's context and adds the call's own id
and tool name, so nothing is copied per call and a tool reads the run's usage as it is now.
``daimon.state.RunState`` is the same class under the name hooks and middleware have always used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic

from daimon.core.cancel import CancelToken
from daimon.core.chat import _NO_USAGE, Usage  # the shared zero: a run starts from it
from daimon.core.checkpoints import idempotency_key
from daimon.core.errors import NoClientError
from daimon.core.messages import Message
from daimon.tools._client import Elicitation, LogLevel, RunClient, current_client, log_locally

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from daimon.core.checkpoints import EffectRecord

    DepsT = TypeVar("DepsT", default=Any)
else:  # typing.TypeVar takes no default before Python 3.13; only type checkers read it
    from typing import TypeVar

    DepsT = TypeVar("DepsT")

__all__ = ("RunContext",)

_SHARED = (
    "agent_name",
    "cancel",
    "client",
    "cost",
    "deps",
    "effects",
    "iteration",
    "messages",
    "on_usage",
    "run_id",
    "session_id",
    "usage",
)
"""The run-level fields: one value per run, seen alike by the run's context and its call views."""

_NO_EFFECTS: Mapping[str, EffectRecord] = MappingProxyType({})


class RunContext(Generic[DepsT]):
    """One run, as its tools, hooks, middleware, extensions and system prompts see it.

    A tool gets it by declaring a parameter of this type (kept out of the tool's schema). The
    agent loop owns and updates it; others should only read it, except through
    :meth:`report_usage`. Build one yourself to call a tool directly:
    ``RunContext(run_id="r", deps=my_deps)``.
    """

    # Plain slots: the loop reads and writes these on every step (a property each would cost).
    __slots__ = (*_SHARED, "call_id", "tool_name")

    run_id: str
    """The run's id; stable across resumes."""
    agent_name: str
    """The name of the agent running."""
    deps: DepsT
    """What the caller passed as ``prompt(..., deps=...)``."""
    session_id: str | None
    """The conversation the run continues, if it names one."""
    cancel: CancelToken
    """The run's cancel token; long tools may check it."""
    messages: list[Message]
    """The conversation as the model sees it: system, history, prompt and this run's turns."""
    usage: Usage
    """Tokens used by the run so far (sub-agents' included)."""
    cost: float
    """Dollars spent by the run so far (with a cost model)."""
    iteration: int
    """Model calls made so far."""
    on_usage: Callable[[Usage, float], None] | None
    """Where :meth:`report_usage` sends usage (set by the agent loop)."""
    call_id: str
    """The id of the tool call being executed (``""`` outside a tool call)."""
    tool_name: str
    """The name of the tool being executed (``""`` outside a tool call)."""
    effects: Mapping[str, EffectRecord]
    """The run's effect ledger: every call of a tool that declares an effect, by call id, with
    where it stands (started, completed, in doubt, skipped). Replaced, never mutated."""
    client: RunClient | None
    """The caller's back-channel (an MCP client, set by daimon's MCP server), else ``None``.

    Use it through :meth:`log`, :meth:`report_progress`, :meth:`sample` and :meth:`elicit`,
    which also find the client of an MCP call that started this run.
    """

    def __init__(
        self,
        *,
        run_id: str,
        deps: DepsT = None,  # type: ignore[assignment]  # a run without deps has None
        agent_name: str = "",
        session_id: str | None = None,
        cancel: CancelToken | None = None,
        messages: list[Message] | None = None,
        usage: Usage | None = None,
        cost: float = 0.0,
        iteration: int = 0,
        call_id: str = "",
        tool_name: str = "",
        on_usage: Callable[[Usage, float], None] | None = None,
        client: RunClient | None = None,
    ) -> None:
        self.run_id = run_id
        self.agent_name = agent_name
        self.deps = deps
        self.session_id = session_id
        self.cancel = CancelToken() if cancel is None else cancel
        self.messages = [] if messages is None else messages
        self.usage = _NO_USAGE if usage is None else usage
        self.cost = cost
        self.iteration = iteration
        self.on_usage = on_usage
        self.effects = _NO_EFFECTS
        self.client = client
        self.call_id = call_id
        self.tool_name = tool_name

    def for_call(self, call_id: str, tool_name: str) -> RunContext[DepsT]:
        """A view of this run for one tool call: the run's fields, the call's id and tool."""
        view: RunContext[DepsT] = object.__new__(_CallView)
        view._run = self  # type: ignore[attr-defined]
        view.call_id = call_id
        view.tool_name = tool_name
        return view

    def report_usage(self, usage: Usage, cost: float = 0.0) -> None:
        """Add a sub-agent's (or any nested model call's) usage and cost to this run's totals."""
        on_usage = self.on_usage
        if on_usage is not None:
            on_usage(usage, cost)

    def _client(self) -> RunClient | None:
        client = self.client
        return client if client is not None else current_client.get()

    async def log(self, level: LogLevel, data: Any, *, logger: str | None = None) -> None:
        """Log a message to the caller: an MCP client sees ``notifications/message``.

        ``data`` is any JSON value (a string, usually). Without a client (a tool run by an
        agent, not served over MCP) the message goes to Python logging, logger
        ``daimon.tools`` (``daimon.tools.<logger>`` when named).
        """
        client = self._client()
        if client is None:
            log_locally(self.tool_name, level, data, logger)
        else:
            await client.log(level, data, logger)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Report progress: ``progress`` of ``total`` (if known), with an optional message.

        An MCP caller that asked for progress sees ``notifications/progress``; anywhere else
        this does nothing.
        """
        client = self._client()
        if client is not None:
            await client.report_progress(progress, total, message)

    async def sample(
        self,
        prompt: str,
        *,
        system: str | None = None,
        max_tokens: int = 1024,
        temperature: float | None = None,
    ) -> str:
        """Ask the caller's model (MCP sampling) to answer ``prompt``; the answer's text.

        Raises:
            NoClientError: No MCP client called this tool, or it does not offer sampling.
        """
        client = self._client()
        if client is None:
            raise NoClientError("sampling", "the tool was not called by an MCP client")
        return await client.sample(
            prompt, system=system, max_tokens=max_tokens, temperature=temperature
        )

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Elicitation:
        """Ask the caller's user (MCP elicitation) to fill in a form.

        ``schema`` is a flat JSON Schema object (string, number, integer, boolean and enum
        properties, with ``default``s if wanted). Returns the user's :class:`Elicitation`.

        Raises:
            NoClientError: No MCP client called this tool, or it does not offer elicitation.
        """
        client = self._client()
        if client is None:
            raise NoClientError("input", "the tool was not called by an MCP client")
        return await client.elicit(message, schema)

    @property
    def idempotency_key(self) -> str:
        """``run_id:call_id``: the same for a call and any retry or resumed re-delivery of it."""
        return idempotency_key(self.run_id, self.call_id)

    def __repr__(self) -> str:
        call = f", call_id={self.call_id!r}, tool_name={self.tool_name!r}" if self.call_id else ""
        return (
            f"RunContext(run_id={self.run_id!r}{call}, iteration={self.iteration}, "
            f"messages={len(self.messages)}, usage={self.usage!r}, cost={self.cost!r})"
        )


def _through(name: str) -> property:
    """A run-level field of a call view, read and written on the run's context."""

    def get(view: Any) -> Any:
        return getattr(view._run, name)

    def set_(view: Any, value: Any) -> None:
        setattr(view._run, name, value)

    return property(get, set_, doc=f"The run's ``{name}``.")


class _CallView(RunContext[Any]):
    """A tool call's view of its run: its own ``call_id`` and ``tool_name``, the rest the run's.

    Its properties shadow the run-level slots it inherits (which stay unused): three stores make
    a view, where a copy of the run's context would be twelve, and never goes stale.
    """

    __slots__ = ("_run",)

    if not TYPE_CHECKING:  # to a type checker a view is just a RunContext
        agent_name = _through("agent_name")
        cancel = _through("cancel")
        client = _through("client")
        cost = _through("cost")
        deps = _through("deps")
        effects = _through("effects")
        iteration = _through("iteration")
        messages = _through("messages")
        on_usage = _through("on_usage")
        run_id = _through("run_id")
        session_id = _through("session_id")
        usage = _through("usage")
