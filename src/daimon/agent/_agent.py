"""Agent: the configuration of an agent. Runs live in the loop, never on the agent."""

from __future__ import annotations

import asyncio
import copy
import inspect
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeAlias

from daimon.agent._chain import NO_LAYERS, Layers, layers
from daimon.agent._client_tools import ClientTools, client_tools_of, from_custom
from daimon.agent._loop import run_events
from daimon.agent._output import OutputSpec
from daimon.agent._tool_choice import check_tool_choice, checked_tool_choice
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, ClientToolError, DaimonError
from daimon.core.events import Done, StreamEvent
from daimon.core.messages import Message
from daimon.core.results import AgentResponse, ApprovalDecision
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.cost import CostModel
from daimon.extensions import Extension
from daimon.guardrails import InputGuardrail, OutputGuardrail
from daimon.hooks import AgentHook
from daimon.kit.checks import check_non_negative as _non_negative
from daimon.kit.checks import check_positive as _positive
from daimon.middleware import Middleware, MiddlewareStack
from daimon.state import RunState
from daimon.tools import Tool, ToolRegistry, ToolRetryPolicy

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from daimon.core.checkpoints import CheckpointState
    from daimon.core.protocols import Checkpoint, Memory, Model
    from daimon.limits import Limiter
    from daimon.skills import Skills, SkillSource

    DepsT = TypeVar("DepsT", default=Any)
    OutputT = TypeVar("OutputT", default=str)
else:  # typing.TypeVar takes no default before Python 3.13; only type checkers read them
    from typing import TypeVar

    DepsT = TypeVar("DepsT")
    OutputT = TypeVar("OutputT")

__all__ = ("Agent", "PromptCacheWarning", "SystemPrompt")

SystemPrompt: TypeAlias = str | Callable[[RunState], str | Awaitable[str]] | None
"""A fixed system prompt, or a function of the run's state that builds one (sync or async)."""

_NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})


class Agent(Generic[DepsT, OutputT]):
    """An agent: a model, its instructions and its tools, plus limits and extensions.

    An Agent holds configuration only; every run keeps its own state, so one Agent serves any
    number of concurrent prompts. Configuration is checked here: a mistake raises
    :class:`BuilderError` at once, never on the first prompt.

    ``Agent[DepsT, OutputT]`` is generic in what its tools receive as ``ctx.deps`` (set
    ``deps_type``) and in what a run answers: ``response.output`` is an ``OutputT``, the
    ``output_type`` (a ``str`` for a text agent, whose output is its text).

    Args:
        model: The model: a :class:`~daimon.core.protocols.Model`, or a string such as
            ``"openai:gpt-4o-mini"`` or ``"local:smollm2"`` (resolved here).
        name: The agent's name, as servers, traces and multi-agent patterns show it.
        system_prompt: Instructions for every run: a string, or a function of the run's
            :class:`~daimon.state.RunState` that returns one (sync or async).
        tools: Tools, or plain functions made tools with :func:`~daimon.tools.tool`.
        memory: Where session history lives; a 50-message sliding window when not given. Used
            only by runs that name a ``session_id``.
        max_iterations: The most model calls one run may make.
        hooks: Observers of the run's steps (:class:`~daimon.hooks.AgentHook`).
        middleware: Interceptors of requests, responses and tool calls, in order.
        extensions: Wrappers of every model call and tool call
            (:class:`~daimon.extensions.Extension`); the first listed is the outermost. Hooks'
            call callbacks and middleware run outside them.
        input_guardrails: Checks of the prompt before the run starts.
        output_guardrails: Checks of the final answer before it is returned.
        cost_model: Prices model calls (a :class:`~daimon.cost.PriceTable`, say).
        max_budget: Dollars one run may spend; needs ``cost_model``. Each call reserves its
            worst case first and is refused when that could pass the limit.
        validate_tool_inputs: Check tool arguments against their JSON Schema before a call.
        tool_retry_policy: Retries for tools that raise, unless a tool has its own.
        temperature: Sampling temperature sent with every request.
        max_tokens: The most tokens a model call may write (also bounds budget reservations).
        tool_choice: Whether the model must call a tool: ``"auto"`` (it chooses), ``"none"``,
            ``"required"`` or a tool's name (it must call that one). Sent with each model call
            until the model calls a tool, then the model chooses again, so a forced call cannot
            repeat forever; ``None`` leaves it to the provider (``"auto"``).
        examples: Few-shot ``(user, assistant)`` pairs put before the conversation.
        model_settings: Provider-specific request settings, passed through as given.
        checkpoint: Saves each run after every model response and tool result, so prompting
            again with the same ``run_id`` after a crash continues it; a finished run returns
            its answer again.
        output_type: A type (pydantic model, dataclass, TypedDict, ...) the answer must have;
            ``response.output`` is then an instance of it.
        output_retries: How often a structured answer that does not fit is sent back to the
            model before :class:`~daimon.core.errors.OutputValidationError`.
        max_repeated_tool_calls: The most times one run may make the same tool call (same
            name, same arguments) and get the same result; the call that would go past it is not
            run, and the run raises :class:`~daimon.core.errors.RepeatedToolCallError`. A call
            whose result changed (polling) starts its count again; ``None`` turns the guard off.
        deps_type: The type of ``deps`` that prompts pass to tools; a prompt with ``deps`` of
            another type raises :class:`BuilderError`.
        skills: Skills the agent loads on demand (:class:`~daimon.skills.Skills`, a folder, or
            a list of folders): the system prompt lists each one's name and description, and
            the tools ``load_skill`` and ``read_skill_file`` load the rest when the model asks.
        limits: Shared rate limits (:class:`~daimon.limits.Limiter`): each model call waits its
            turn under them, keyed by the model's name (the model is wrapped in a
            :class:`~daimon.limits.LimitedModel`; wrap it yourself to choose the key). A streamed
            run shows a wait as a :class:`~daimon.core.events.RateLimitWait` event.
    """

    __slots__ = (
        "_last_system",
        "_memory",
        "checkpoint",
        "cost_model",
        "deps_type",
        "examples",
        "extensions",
        "hooks",
        "input_guardrails",
        "layers",
        "limits",
        "max_budget",
        "max_iterations",
        "max_repeated_tool_calls",
        "max_tokens",
        "middleware",
        "model",
        "model_settings",
        "name",
        "native_output",
        "output",
        "output_guardrails",
        "output_retries",
        "skills",
        "system_prompt",
        "temperature",
        "tool_choice",
        "tool_retry_policy",
        "tools",
        "validate_tool_inputs",
    )

    def __init__(
        self,
        model: Model | str | None = None,
        *,
        name: str = "agent",
        system_prompt: SystemPrompt = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        memory: Memory | None = None,
        max_iterations: int = 10,
        hooks: Iterable[AgentHook] = (),
        middleware: Iterable[Middleware] = (),
        extensions: Iterable[Extension] = (),
        input_guardrails: Iterable[InputGuardrail] = (),
        output_guardrails: Iterable[OutputGuardrail] = (),
        cost_model: CostModel | None = None,
        max_budget: float | None = None,
        validate_tool_inputs: bool = True,
        tool_retry_policy: ToolRetryPolicy | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tool_choice: str | None = None,
        examples: Sequence[tuple[str, str]] = (),
        model_settings: Mapping[str, Any] | None = None,
        checkpoint: Checkpoint | None = None,
        output_type: type[OutputT] | None = None,
        output_retries: int = 2,
        max_repeated_tool_calls: int | None = 3,
        deps_type: type[DepsT] | None = None,
        skills: SkillSource | None = None,
        limits: Limiter | None = None,
    ) -> None:
        # A check is a call only for a setting not left at its default (the construct metric).
        self.model: Model = _model(model) if limits is None else _limited(_model(model), limits)
        self.limits = limits
        self._last_system: str | None = None  # the last built system prompt; "" once warned
        self.name = name
        if system_prompt is not None and type(system_prompt) is not str:
            _check_system_prompt(system_prompt)
        self.system_prompt = system_prompt
        self.skills, tools = (None, tools) if skills is None else _with_skills(skills, tools)
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self._memory = memory
        if max_iterations != 10 or type(max_iterations) is not int:
            _positive("max_iterations", max_iterations)
        self.max_iterations = max_iterations
        repeats = max_repeated_tool_calls
        if repeats is not None and (repeats != 3 or type(repeats) is not int):
            _positive("max_repeated_tool_calls", repeats, "or None")
        self.max_repeated_tool_calls = repeats
        self.hooks: tuple[AgentHook, ...] = tuple(hooks) if hooks else ()
        self.middleware = _stack(middleware)
        self.extensions: tuple[Extension, ...] = tuple(extensions) if extensions else ()
        self.layers: Layers = (
            layers(self.hooks, self.middleware, self.extensions)
            if hooks or middleware or extensions
            else NO_LAYERS
        )
        """The model-call and tool-call extension chains' layers, outermost first."""
        self.input_guardrails: tuple[InputGuardrail, ...] = tuple(input_guardrails)
        self.output_guardrails: tuple[OutputGuardrail, ...] = tuple(output_guardrails)
        self.cost_model = cost_model
        self.max_budget = None if max_budget is None else _budget(max_budget, cost_model)
        self.validate_tool_inputs = validate_tool_inputs
        self.tool_retry_policy = tool_retry_policy
        if temperature is not None:
            _check_temperature(temperature)
        self.temperature = temperature
        self.max_tokens = None if max_tokens is None else _positive("max_tokens", max_tokens)
        self.tool_choice = None if tool_choice is None else checked_tool_choice(tool_choice)
        self.examples: tuple[Message, ...] = _examples(examples) if examples else ()
        self.checkpoint = checkpoint
        if output_retries != 2 or type(output_retries) is not int:
            _non_negative("output_retries", output_retries)
        self.output_retries = output_retries
        self.output = OutputSpec(output_type) if output_type is not None else None
        self.native_output = bool(getattr(self.model, "supports_json_schema", False))
        self.model_settings = (
            MappingProxyType(dict(model_settings)) if model_settings else _NO_SETTINGS
        )
        self.deps_type = deps_type

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={getattr(self.model, 'model_name', self.model)!r})"

    @property
    def memory(self) -> Memory:
        """Where session history lives (a 50-message sliding window unless configured)."""
        if self._memory is None:
            from daimon.memory import SlidingWindowMemory

            self._memory = SlidingWindowMemory()
        return self._memory

    async def system_message(self, state: RunState) -> Message | None:
        """The system message for a run: ``system_prompt``, then the skills' list, if any."""
        prompt = self.system_prompt
        if prompt is None or isinstance(prompt, str):
            text = prompt
        else:
            text = await _built(prompt, state)
            self._check_stable(text)
        if self.skills is not None:
            listing = self.skills.instructions
            text = f"{text}\n\n{listing}" if text else listing
        return None if text is None else Message.system(text)

    def _check_stable(self, text: str) -> None:
        """Warn once when a built system prompt changes while the model caches prompts."""
        last = self._last_system
        if last == "" or last == text:  # "": warned already
            return
        self._last_system = text
        if last is None or getattr(self.model, "prompt_cache", "off") == "off":
            return
        self._last_system = ""
        warnings.warn(
            f"agent {self.name!r}: the system prompt changed from one run to the next while "
            f"{getattr(self.model, 'provider', 'the model')} caches prompts; the cache cannot "
            "reuse the tools or the history after a changed system prompt. Put what changes in "
            "the user message (or pass prompt_cache='off' to the model).",
            PromptCacheWarning,
            stacklevel=3,
        )

    async def prompt(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: DepsT | None = None,
        cancel: CancelToken | None = None,
        client_tools: Sequence[ToolSpec] | None = None,
    ) -> AgentResponse[OutputT]:
        """Run the agent to its final answer.

        Args:
            input: The user's message.
            session_id: Continue this conversation in ``memory`` (and store the new turns).
            history: The conversation so far, given directly (not with ``session_id``).
            instructions: Added to the system prompt for this run only.
            run_id: The run's id: with a ``checkpoint``, the same id resumes a run that died.
            deps: What tools receive as ``ctx.deps``.
            cancel: A token that cancels the run (it raises
                :class:`~daimon.core.errors.RunCancelled`).
            client_tools: Tools the caller runs itself: the model sees them beside the agent's
                own, and a call to one pauses the run with it in ``client_calls``; pass its
                result to :meth:`resume` (``results``).
        """
        if deps is not None and self.deps_type is not None:
            self._check_deps(deps)
        client = client_tools_of(self, client_tools, None) if client_tools else None
        response: AgentResponse[Any] | None = None
        # Drained here, not by _drain: a coroutine less on every run (the run metric).
        async for event in run_events(
            self,
            input,
            stream=False,
            session_id=session_id,
            run_id=run_id,
            deps=deps,
            cancel=cancel,
            history=history,
            instructions=instructions,
            client=client,
        ):
            if type(event) is Done:
                response = event.response
        if response is None:  # pragma: no cover - the loop always ends with Done or raises
            raise DaimonError("the run ended without a response")
        return response

    def prompt_stream(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: DepsT | None = None,
        cancel: CancelToken | None = None,
        client_tools: Sequence[ToolSpec] | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run the agent, streaming its events; the last is ``Done``, carrying the response.

        Takes the arguments of :meth:`prompt`.
        """
        if deps is not None and self.deps_type is not None:
            self._check_deps(deps)
        client = client_tools_of(self, client_tools, None) if client_tools else None
        return run_events(
            self,
            input,
            stream=True,
            session_id=session_id,
            run_id=run_id,
            deps=deps,
            cancel=cancel,
            history=history,
            instructions=instructions,
            client=client,
        )

    async def resume(
        self,
        paused: AgentResponse[OutputT] | str,
        approvals: Mapping[str, ApprovalDecision | bool] | None = None,
        *,
        deps: DepsT | None = None,
        cancel: CancelToken | None = None,
        results: Mapping[str, ToolOutput | str] | None = None,
        client_tools: Sequence[ToolSpec] | None = None,
    ) -> AgentResponse[OutputT]:
        """Continue a paused or interrupted run.

        Args:
            paused: The paused run's response, or its run id (which needs a ``checkpoint``).
            approvals: Decisions by approval id (``True``/``False`` or an
                :class:`ApprovalDecision` with a reason); any subset, in any order. The run goes
                on once every pending call is decided, and pauses again otherwise.
            deps: Dependencies for the tools, as in :meth:`prompt`.
            cancel: A cancel token for the rest of the run.
            results: Results of the paused run's ``client_calls``, by call id (a string is a
                text result; a :class:`ToolOutput` can be an error); any subset.
            client_tools: The client tools for the rest of the run; by default those the paused
                run was given (a run resumed by id from a checkpoint store needs them again).
        """
        events = self._resumed(paused, approvals, False, deps, cancel, results, client_tools)
        return await _drain(events)

    def resume_stream(
        self,
        paused: AgentResponse[OutputT] | str,
        approvals: Mapping[str, ApprovalDecision | bool] | None = None,
        *,
        deps: DepsT | None = None,
        cancel: CancelToken | None = None,
        results: Mapping[str, ToolOutput | str] | None = None,
        client_tools: Sequence[ToolSpec] | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Continue a paused run, streaming its events; takes the arguments of :meth:`resume`."""
        return self._resumed(paused, approvals, True, deps, cancel, results, client_tools)

    def _resumed(
        self,
        paused: AgentResponse[OutputT] | str,
        approvals: Mapping[str, ApprovalDecision | bool] | None,
        stream: bool,
        deps: DepsT | None,
        cancel: CancelToken | None,
        results: Mapping[str, ToolOutput | str] | None,
        client_tools: Sequence[ToolSpec] | None,
    ) -> AsyncIterator[StreamEvent]:
        """The events of a resumed run (checked before anything runs)."""
        if deps is not None and self.deps_type is not None:
            self._check_deps(deps)
        decisions = {
            key: value if isinstance(value, ApprovalDecision) else ApprovalDecision(approved=value)
            for key, value in (approvals or {}).items()
        }
        state: CheckpointState | None
        if isinstance(paused, str):
            if self.checkpoint is None:
                raise BuilderError("resuming by run id needs an agent with a checkpoint")
            state, run_id = None, paused
        else:
            if paused.state is None:
                raise BuilderError("this response is not a paused run: it has no state to resume")
            state, run_id = paused.state, paused.run_id
        return run_events(
            self,
            None,
            stream=stream,
            run_id=run_id,
            deps=deps,
            cancel=cancel,
            resume=state,
            decisions=decisions,
            client=_resumed_client(self, state, results, client_tools),
        )

    def prompt_sync(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: DepsT | None = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse[OutputT]:
        """Run the agent from synchronous code (not from inside a running event loop).

        Takes the arguments of :meth:`prompt`.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise DaimonError("prompt_sync() cannot run inside an event loop: await prompt()")
        return asyncio.run(
            self.prompt(
                input,
                session_id=session_id,
                history=history,
                instructions=instructions,
                run_id=run_id,
                deps=deps,
                cancel=cancel,
            )
        )

    def replace(self, **changes: Any) -> Agent[DepsT, OutputT]:
        """A new agent with this one's configuration and ``changes`` (checked like the constructor).

        Example: ``agent.replace(tools=[*agent.tools, handoff], memory=SQLiteMemory("a.db"))``.
        """
        names = _setting_names()
        unknown = set(changes) - set(names)
        if unknown:
            raise BuilderError(f"Agent has no setting(s): {', '.join(sorted(unknown))}")
        settings = {name: _setting(self, name) for name in names if name not in changes}
        return type(self)(**settings, **changes)

    def check_client_tools(self, client_tools: Sequence[ToolSpec]) -> None:
        """Check client tools as :meth:`prompt` would, before a run (a server's request).

        Raises:
            ClientToolError: A spec is malformed, given twice, or clashes with a tool's name.
        """
        client_tools_of(self, client_tools, None)

    def check_tool_choice(self, client_tools: Sequence[ToolSpec] = ()) -> None:
        """Check ``tool_choice`` against the tools a run would have, before it starts.

        Raises:
            BuilderError: ``tool_choice`` asks for a tool call and the agent and
                ``client_tools`` have no tools, or it names a tool that is none of theirs.
        """
        choice, output = self.tool_choice, self.output
        if choice is None:
            return
        answer = (output.tool_spec,) if output is not None and not self.native_output else ()
        check_tool_choice(choice, (*self.tools.specs, *client_tools, *answer))

    def _check_deps(self, deps: object) -> None:
        expected = self.deps_type
        if expected is not None and not isinstance(deps, expected):
            raise BuilderError(
                f"agent {self.name!r} takes deps of type {expected.__name__}, "
                f"got {type(deps).__name__}"
            )


async def _built(prompt: Callable[[RunState], str | Awaitable[str]], state: RunState) -> str:
    """The text a ``system_prompt`` function returns for this run."""
    text = prompt(state)
    if inspect.isawaitable(text):
        text = await text
    if not isinstance(text, str):
        raise BuilderError(f"system_prompt function returned {type(text).__name__}, not str")
    return text


def _resumed_client(
    agent: Agent[Any, Any],
    state: CheckpointState | None,
    results: Mapping[str, ToolOutput | str] | None,
    client_tools: Sequence[ToolSpec] | None,
) -> ClientTools | None:
    """The client tools of a resumed run: those given, else those its paused state keeps."""
    specs = client_tools
    if specs is None and state is not None:
        specs = from_custom(state.custom)
    if not specs:
        if results:
            raise ClientToolError(
                "results were given, but the run has no client tools: pass client_tools"
            )
        return None
    return client_tools_of(agent, specs, results)


async def _drain(events: AsyncIterator[StreamEvent]) -> AgentResponse[Any]:
    """The response the run's ``Done`` carries."""
    response: AgentResponse[Any] | None = None
    # Drain to the end rather than return early: an unfinished async generator is finalized by
    # asyncio through a new task, which costs more than the whole run.
    async for event in events:
        if type(event) is Done:
            response = event.response
    if response is None:  # pragma: no cover - the loop always ends with Done or raises
        raise DaimonError("the run ended without a response")
    return response


# ---------------------------------------------------------------- the settings, for replace()


@cache
def _setting_names() -> tuple[str, ...]:
    """The constructor's parameters: the one list of an agent's settings."""
    return tuple(inspect.signature(Agent.__init__).parameters)[1:]


def _setting(agent: Agent[Any, Any], name: str) -> Any:
    """The value of one setting, as the constructor takes it back."""
    if name == "model" and agent.limits is not None:  # unwrapped: limits= wraps it again
        return _unlimited(agent.model, agent.limits)
    if name == "memory":
        return agent._memory
    if name == "examples":
        pairs = agent.examples
        return [(pairs[i].text, pairs[i + 1].text) for i in range(0, len(pairs), 2)]
    if name == "output_type":
        return agent.output.output_type if agent.output is not None else None
    if name == "tools" and agent.skills is not None:  # the skills' own come back with skills=
        own = agent.skills.tools
        return [found for found in agent.tools if not any(found is t for t in own)]
    return getattr(agent, name)


# ------------------------------------------------------------------- the constructor's checks


def _model(model: Model | str | None) -> Model:
    if model is None:
        raise BuilderError("Agent needs a model")
    if isinstance(model, str):
        from daimon.models import infer_model

        return infer_model(model)
    if not (hasattr(model, "generate") and hasattr(model, "generate_stream")):
        raise BuilderError(
            f"model must be a Model (generate, generate_stream) or a model string, "
            f"not {type(model).__name__}"
        )
    return model


def _limited(model: Model, limits: object) -> Model:
    """``model`` wrapped to wait its turn under ``limits`` (once: not again by the same limiter).

    Inside a :class:`~daimon.models.RetryingModel`, never around it: each retry then waits its
    turn again, and a 429's pause reaches every process before the next try.
    """
    from daimon.limits import LimitedModel, Limiter
    from daimon.models.retry import RetryingModel

    if not isinstance(limits, Limiter):
        raise BuilderError(f"limits must be a daimon.limits.Limiter, got {type(limits).__name__}")
    if isinstance(model, RetryingModel):
        retrying = copy.copy(model)
        retrying.model = _limited(model.model, limits)
        return retrying
    if isinstance(model, LimitedModel) and model.limiter is limits:
        return model
    return LimitedModel(model, limits)


def _unlimited(model: Model, limits: Limiter) -> Model:
    """The model as ``limits=`` found it (a wrapper with a key of the caller's choice stays)."""
    from daimon.limits import LimitedModel
    from daimon.models.retry import RetryingModel

    if isinstance(model, RetryingModel):
        retrying = copy.copy(model)
        retrying.model = _unlimited(model.model, limits)
        return retrying
    if (
        isinstance(model, LimitedModel)
        and model.limiter is limits
        and model.key == model.model.model_name
    ):
        return model.model
    return model


def _budget(max_budget: object, cost_model: CostModel | None) -> float:
    if isinstance(max_budget, bool) or not isinstance(max_budget, (int, float)) or max_budget < 0:
        raise BuilderError(f"max_budget must be a non-negative number, got {max_budget!r}")
    if cost_model is None:
        raise BuilderError("max_budget needs a cost_model to price the calls")
    return float(max_budget)


def _check_temperature(temperature: object) -> None:
    if isinstance(temperature, bool) or not (
        isinstance(temperature, (int, float)) and temperature >= 0
    ):
        raise BuilderError(f"temperature must be a non-negative number, got {temperature!r}")


class PromptCacheWarning(UserWarning):
    """A request prefix changes from call to call, so the provider's prompt cache cannot help."""


def _check_system_prompt(system_prompt: object) -> None:
    if not callable(system_prompt):
        raise BuilderError("system_prompt must be a string or a callable")


def _with_skills(
    skills: SkillSource, tools: Iterable[Tool | Callable[..., Any]]
) -> tuple[Skills | None, Iterable[Tool | Callable[..., Any]]]:
    """The skills, and the tools with the skills' own added (once: ``replace`` passes both)."""
    from daimon.skills import as_skills

    loaded = as_skills(skills)
    if loaded is None:
        return None, tools
    given = list(tools)
    extra = [t for t in loaded.tools if not any(t is g for g in given)]
    return loaded, [*given, *extra]


def _stack(middleware: Iterable[Middleware] | MiddlewareStack) -> MiddlewareStack:
    if isinstance(middleware, MiddlewareStack):
        return middleware
    return MiddlewareStack(middleware) if middleware else _NO_MIDDLEWARE


def _examples(examples: Sequence[tuple[str, str]]) -> tuple[Message, ...]:
    messages: list[Message] = []
    for example in examples:
        if not (isinstance(example, tuple) and len(example) == 2):
            raise BuilderError("examples must be (user, assistant) pairs of strings")
        user, assistant = example
        messages.append(Message.user(user))
        messages.append(Message.assistant(assistant))
    return tuple(messages)


_NO_MIDDLEWARE = MiddlewareStack()
