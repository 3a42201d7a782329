"""Chain: steps run one after another over a shared context."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage
from daimon.core.errors import RunCancelled
from daimon.core.results import AgentResponse
from daimon.orchestration._common import (
    ContextBase,
    Promptable,
    Renderable,
    StepTiming,
    Tally,
    call,
    callable_name,
    render,
)
from daimon.orchestration._errors import NodeError, OrchestrationBuildError

__all__ = (
    "AgentStep",
    "Chain",
    "ChainContext",
    "ChainResult",
    "ChainStep",
    "TransformStep",
)


class ChainContext(ContextBase):
    """What the steps of one chain run share.

    Attributes:
        value: The current value: the chain's input, then each step's result.
        values: Named values steps keep for later steps (``output_key``/``input_key``).
        cancel: The run's cancel token, or ``None``.
    """

    __slots__ = ("value", "values")

    def __init__(
        self,
        value: Any,
        values: dict[str, Any],
        *,
        cancel: CancelToken | None = None,
        tally: Tally | None = None,
    ) -> None:
        super().__init__(cancel, tally if tally is not None else Tally())
        self.value = value
        self.values = values


ChainStep: TypeAlias = Callable[[ChainContext], Awaitable[Any]]
"""A step: an async callable of the context; a result other than ``None`` becomes the value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainResult:
    """What a chain run produced."""

    value: Any
    """The last step's value."""
    values: dict[str, Any]
    """Every named value."""
    usage: Usage
    """Tokens used by every agent of the run."""
    cost: float
    """Dollars spent by every agent of the run."""
    timings: tuple[StepTiming, ...]
    """One entry per step, in order."""
    kind: Literal["chain_result"] = field(default="chain_result", init=False, repr=False)


class AgentStep:
    """A chain step that prompts an agent and makes its answer the current value.

    The prompt is the current value (or the named value ``input_key``) as text, or, with
    ``prompt_template``, the template filled with ``{{input}}`` and every named value. The answer's
    text becomes the current value and, with ``output_key``, a named value too. Usage and cost are
    added to the chain's totals, and the chain's cancel token is passed on.

    Args:
        agent: A :class:`daimon.Agent`, or anything with ``async prompt(text, *, cancel=None)``.
        input_key: Prompt with this named value instead of the current value.
        output_key: Also keep the answer as this named value.
        prompt_template: A ``{{name}}`` template string, or a template object with ``render``.
        name: The step's name in timings and errors (default: the agent's name).
    """

    __slots__ = ("agent", "input_key", "name", "output_key", "prompt_template")

    def __init__(
        self,
        agent: Promptable,
        *,
        input_key: str | None = None,
        output_key: str | None = None,
        prompt_template: str | Renderable | None = None,
        name: str | None = None,
    ) -> None:
        if not callable(getattr(agent, "prompt", None)):
            raise OrchestrationBuildError(
                f"AgentStep needs an object with an async prompt() method, not "
                f"{type(agent).__name__}"
            )
        self.agent = agent
        self.input_key = input_key
        self.output_key = output_key
        self.prompt_template = prompt_template
        self.name = name or callable_name(agent)

    def __repr__(self) -> str:
        return f"AgentStep({self.name!r})"

    async def __call__(self, ctx: ChainContext) -> str:
        """Prompt the agent; its answer's text."""
        if self.input_key is None:
            value = ctx.value
        elif self.input_key in ctx.values:
            value = ctx.values[self.input_key]
        else:
            known = ", ".join(sorted(ctx.values)) or "none"
            raise KeyError(f"no value named {self.input_key!r} (values: {known})")
        if self.prompt_template is None:
            text = value if isinstance(value, str) else str(value)
        else:
            text = render(self.prompt_template, {**ctx.values, "input": value})
        response: AgentResponse = await ctx.prompt(self.agent, text)
        if self.output_key is not None:
            ctx.values[self.output_key] = response.text
        return response.text


class TransformStep:
    """A chain step that maps the current value through a function (sync or async).

    Unlike a plain step, its result always becomes the value, even ``None``.
    """

    __slots__ = ("fn", "name")

    def __init__(self, fn: Callable[[Any], Any], *, name: str | None = None) -> None:
        if not callable(fn):
            raise OrchestrationBuildError(
                f"TransformStep needs a callable, not {type(fn).__name__}"
            )
        self.fn = fn
        self.name = name or callable_name(fn)

    def __repr__(self) -> str:
        return f"TransformStep({self.name!r})"

    async def __call__(self, ctx: ChainContext) -> None:
        """Replace the current value with ``fn(value)``."""
        ctx.value = await call(self.fn, ctx.value)


class Chain:
    """Steps run in order over one :class:`ChainContext`.

    A step is an :class:`AgentStep`, a :class:`TransformStep`, or any callable of the context
    (sync or async) whose result, unless ``None``, becomes the current value (an agent response
    it returns is counted in the totals). An agent given directly is wrapped in an
    :class:`AgentStep`; a chain is a step too.

    Raises:
        OrchestrationBuildError: There are no steps, or one is not callable.
    """

    __slots__ = ("name", "steps")

    def __init__(
        self,
        steps: Iterable[ChainStep | Promptable | Callable[[ChainContext], Any]],
        *,
        name: str = "chain",
    ) -> None:
        wrapped: list[Callable[[ChainContext], Any]] = []
        for position, step in enumerate(steps):
            if callable(step):
                wrapped.append(step)
            elif callable(getattr(step, "prompt", None)):
                wrapped.append(AgentStep(step))
            else:
                raise OrchestrationBuildError(
                    f"chain step {position} must be callable or an agent, not {type(step).__name__}"
                )
        if not wrapped:
            raise OrchestrationBuildError(f"chain {name!r} has no steps")
        self.steps: tuple[Callable[[ChainContext], Any], ...] = tuple(wrapped)
        self.name = name

    def __repr__(self) -> str:
        return f"Chain({self.name!r}, steps={[callable_name(s) for s in self.steps]})"

    def then(self, *steps: ChainStep | Promptable | Callable[[ChainContext], Any]) -> Chain:
        """A new chain with ``steps`` added at the end."""
        return Chain((*self.steps, *steps), name=self.name)

    async def run(
        self,
        input: Any = None,
        *,
        values: Mapping[str, Any] | None = None,
        cancel: CancelToken | None = None,
    ) -> ChainResult:
        """Run every step in order, starting from ``input`` and the named ``values``.

        Raises:
            RunCancelled: ``cancel`` was cancelled (checked before each step).
            NodeError: A step raised; the error names the step and chains the cause.
        """
        ctx = ChainContext(input, dict(values or {}), cancel=cancel)
        timings = await self._run_steps(ctx)
        return ChainResult(
            value=ctx.value,
            values=ctx.values,
            usage=ctx.usage,
            cost=ctx.cost,
            timings=timings,
        )

    async def __call__(self, ctx: ChainContext) -> None:
        """Run as one step of an outer chain, on its context."""
        await self._run_steps(ctx)

    async def _run_steps(self, ctx: ChainContext) -> tuple[StepTiming, ...]:
        timings: list[StepTiming] = []
        for step in self.steps:
            if ctx.cancel is not None:
                ctx.cancel.raise_if_cancelled()
            name = callable_name(step)
            started = time.perf_counter()
            try:
                result = await call(step, ctx)
            except RunCancelled:
                raise
            except Exception as exc:
                raise NodeError(name, exc, what="step") from exc
            if result is not None:
                ctx.value = result
                if isinstance(result, AgentResponse):
                    ctx.record(result)
            timings.append(StepTiming(name=name, seconds=time.perf_counter() - started))
        return tuple(timings)
