"""Agent: the configuration of an agent. Runs live in the loop, never on the agent."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

from daimon.agent._loop import run_events
from daimon.agent._output import OutputSpec
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, DaimonError
from daimon.core.events import Done, StreamEvent
from daimon.core.messages import Message, ToolCall
from daimon.core.results import AgentResponse, ApprovalDecision
from daimon.cost import CostModel
from daimon.guardrails import InputGuardrail, OutputGuardrail
from daimon.hooks import AgentHook
from daimon.middleware import Middleware, MiddlewareStack
from daimon.state import RunState
from daimon.tools import Tool, ToolRegistry, ToolRetryPolicy

if TYPE_CHECKING:
    from daimon.core.protocols import Checkpoint, Memory, Model

__all__ = ("Agent", "SystemPrompt")

SystemPrompt: TypeAlias = str | Callable[[RunState], str | Awaitable[str]] | None
"""A fixed system prompt, or a function of the run's state that builds one (sync or async)."""

_NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})


class Agent:
    """An agent: a model, its instructions and its tools, plus limits and extensions.

    An Agent holds configuration only; every run keeps its own state, so one Agent serves any
    number of concurrent prompts. Configuration is checked here: a mistake raises
    :class:`BuilderError` at once, never on the first prompt.

    Conversation history is kept per session: pass ``session_id`` to :meth:`prompt` to continue a
    conversation in ``memory`` (a :class:`~daimon.memory.SlidingWindowMemory` of 50 messages by
    default). A prompt without a session id is a fresh, stateless conversation.

    With a ``checkpoint``, the run's state is saved after every model response and every tool
    result; prompting again with the same ``run_id`` after a crash continues from the last
    checkpoint, never running a tool call whose result was saved, and a finished run just returns
    its answer again.

    ``max_repeated_tool_calls`` stops a model stuck in a loop: it is the most times one run may
    make the same tool call (same name, same arguments) and get the same result. The call that
    would go past it is not run; the run raises
    :class:`~daimon.core.errors.RepeatedToolCallError` instead. A call
    whose result changed (polling a status) starts its count again; ``None`` turns the guard
    off. Counts live in the run, and a resumed run starts them afresh.
    """

    __slots__ = (
        "_memory",
        "checkpoint",
        "cost_model",
        "examples",
        "hooks",
        "input_guardrails",
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
        "system_prompt",
        "temperature",
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
        input_guardrails: Iterable[InputGuardrail] = (),
        output_guardrails: Iterable[OutputGuardrail] = (),
        cost_model: CostModel | None = None,
        max_budget: float | None = None,
        validate_tool_inputs: bool = True,
        tool_retry_policy: ToolRetryPolicy | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        examples: Sequence[tuple[str, str]] = (),
        model_settings: Mapping[str, Any] | None = None,
        checkpoint: Checkpoint | None = None,
        output_type: Any = None,
        output_retries: int = 2,
        max_repeated_tool_calls: int | None = 3,
    ) -> None:
        if model is None:
            raise BuilderError("Agent needs a model")
        if isinstance(model, str):
            from daimon.models import infer_model

            model = infer_model(model)
        elif not (hasattr(model, "generate") and hasattr(model, "generate_stream")):
            raise BuilderError(
                f"model must be a Model (generate, generate_stream) or a model string, "
                f"not {type(model).__name__}"
            )
        if type(max_iterations) is not int or max_iterations < 1:
            raise BuilderError(f"max_iterations must be a positive integer, got {max_iterations!r}")
        if max_repeated_tool_calls is not None and (
            type(max_repeated_tool_calls) is not int or max_repeated_tool_calls < 1
        ):
            raise BuilderError(
                "max_repeated_tool_calls must be a positive integer or None, "
                f"got {max_repeated_tool_calls!r}"
            )
        if max_budget is not None:
            if not isinstance(max_budget, (int, float)) or max_budget < 0:
                raise BuilderError(f"max_budget must be a non-negative number, got {max_budget!r}")
            if cost_model is None:
                raise BuilderError("max_budget needs a cost_model to price the calls")
        if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
            raise BuilderError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if temperature is not None and not (
            isinstance(temperature, (int, float)) and temperature >= 0
        ):
            raise BuilderError(f"temperature must be a non-negative number, got {temperature!r}")
        if system_prompt is not None and not (
            isinstance(system_prompt, str) or callable(system_prompt)
        ):
            raise BuilderError("system_prompt must be a string or a callable")
        self.model: Model = model
        self.name = name
        self.system_prompt = system_prompt
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self._memory = memory
        self.max_iterations = max_iterations
        self.max_repeated_tool_calls = max_repeated_tool_calls
        self.hooks: tuple[AgentHook, ...] = tuple(hooks) if hooks else ()
        self.middleware = MiddlewareStack(middleware) if middleware else _NO_MIDDLEWARE
        self.input_guardrails: tuple[InputGuardrail, ...] = (
            tuple(input_guardrails) if input_guardrails else ()
        )
        self.output_guardrails: tuple[OutputGuardrail, ...] = (
            tuple(output_guardrails) if output_guardrails else ()
        )
        self.cost_model = cost_model
        self.max_budget = float(max_budget) if max_budget is not None else None
        self.validate_tool_inputs = validate_tool_inputs
        self.tool_retry_policy = tool_retry_policy
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.examples: tuple[Message, ...] = _examples(examples) if examples else ()
        self.checkpoint = checkpoint
        if type(output_retries) is not int or output_retries < 0:
            raise BuilderError(
                f"output_retries must be a non-negative integer, got {output_retries!r}"
            )
        self.output_retries = output_retries
        self.output = OutputSpec(output_type) if output_type is not None else None
        self.native_output = bool(getattr(model, "supports_json_schema", False))
        self.model_settings = (
            MappingProxyType(dict(model_settings)) if model_settings else _NO_SETTINGS
        )

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
        """The system message for a run, built from ``system_prompt``."""
        prompt = self.system_prompt
        if prompt is None:
            return None
        if isinstance(prompt, str):
            return Message.system(prompt)
        text = prompt(state)
        if inspect.isawaitable(text):
            text = await text
        if not isinstance(text, str):
            raise BuilderError(f"system_prompt function returned {type(text).__name__}, not str")
        return Message.system(text)

    async def prompt(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse:
        """Run the agent to its final answer."""
        response: AgentResponse | None = None
        async for event in run_events(
            self,
            input,
            stream=False,
            session_id=session_id,
            run_id=run_id,
            deps=deps,
            cancel=cancel,
        ):
            # Drain to the end rather than return early: an unfinished async generator is
            # finalized by asyncio through a new task, which costs more than the whole run.
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
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run the agent, streaming its events; the last is ``Done``, carrying the response."""
        return run_events(
            self,
            input,
            stream=True,
            session_id=session_id,
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
        """Continue a paused or interrupted run.

        Args:
            paused: The paused run's response, or its run id (which needs a ``checkpoint``).
            approvals: Decisions by approval id (``True``/``False`` or an
                :class:`ApprovalDecision` with a reason); any subset, in any order. The run goes
                on once every pending call is decided, and pauses again otherwise.
            deps: Dependencies for the tools, as in :meth:`prompt`.
            cancel: A cancel token for the rest of the run.
        """
        decisions = {
            key: value if isinstance(value, ApprovalDecision) else ApprovalDecision(approved=value)
            for key, value in (approvals or {}).items()
        }
        if isinstance(paused, str):
            if self.checkpoint is None:
                raise BuilderError("resuming by run id needs an agent with a checkpoint")
            state, run_id = None, paused
        else:
            if paused.state is None:
                raise BuilderError("this response is not a paused run: it has no state to resume")
            state, run_id = paused.state, paused.run_id
        response: AgentResponse | None = None
        async for event in run_events(
            self,
            None,
            stream=False,
            session_id=None,
            run_id=run_id,
            deps=deps,
            cancel=cancel,
            resume=state,
            decisions=decisions,
        ):
            if type(event) is Done:
                response = event.response
        if response is None:  # pragma: no cover - the loop always ends with Done or raises
            raise DaimonError("the run ended without a response")
        return response

    def replace(self, **changes: Any) -> Agent:
        """A new agent with this one's configuration and ``changes`` (checked like the constructor).

        Example: ``agent.replace(tools=[*agent.tools, handoff], memory=SQLiteMemory("a.db"))``.
        """
        settings: dict[str, Any] = {
            "model": self.model,
            "name": self.name,
            "system_prompt": self.system_prompt,
            "tools": self.tools,
            "memory": self._memory,
            "max_iterations": self.max_iterations,
            "hooks": self.hooks,
            "middleware": self.middleware.middleware,
            "input_guardrails": self.input_guardrails,
            "output_guardrails": self.output_guardrails,
            "cost_model": self.cost_model,
            "max_budget": self.max_budget,
            "validate_tool_inputs": self.validate_tool_inputs,
            "tool_retry_policy": self.tool_retry_policy,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "examples": [
                (self.examples[i].text, self.examples[i + 1].text)
                for i in range(0, len(self.examples), 2)
            ],
            "model_settings": self.model_settings,
            "checkpoint": self.checkpoint,
            "output_type": self.output.output_type if self.output is not None else None,
            "output_retries": self.output_retries,
            "max_repeated_tool_calls": self.max_repeated_tool_calls,
        }
        unknown = set(changes) - set(settings)
        if unknown:
            raise BuilderError(f"Agent has no setting(s): {', '.join(sorted(unknown))}")
        settings.update(changes)
        return Agent(**settings)

    def requires_approval(self, call: ToolCall) -> bool:
        """Whether a call must wait for a person's approval before it runs."""
        found = self.tools.get(call.name)
        return bool(getattr(found, "requires_approval", False))

    def prompt_sync(
        self,
        input: str | Message,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
    ) -> AgentResponse:
        """Run the agent from synchronous code (not from inside a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise DaimonError("prompt_sync() cannot run inside an event loop: await prompt()")
        return asyncio.run(self.prompt(input, session_id=session_id, run_id=run_id, deps=deps))


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
