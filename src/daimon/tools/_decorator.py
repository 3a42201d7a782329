"""``@tool`` and ``@tool(...)``: the decorator that makes a function a tool."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar, overload

from daimon.core.checkpoints import Effect
from daimon.tools._function import FunctionTool
from daimon.tools._retry import ToolRetryPolicy

__all__ = ("tool",)

P = ParamSpec("P")
R = TypeVar("R")


@overload
def tool(
    function: Callable[P, R],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retry_policy: ToolRetryPolicy | None = None,
    requires_approval: bool = False,
    effect: Effect = "repeatable",
    inline: bool = False,
) -> FunctionTool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retry_policy: ToolRetryPolicy | None = None,
    requires_approval: bool = False,
    effect: Effect = "repeatable",
    inline: bool = False,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    function: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    retry_policy: ToolRetryPolicy | None = None,
    requires_approval: bool = False,
    effect: Effect = "repeatable",
    inline: bool = False,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a sync or async function a tool; use as ``@tool`` or ``@tool(name=..., ...)``.

    The JSON Schema comes from the type hints, the descriptions from the docstring (Google,
    NumPy or reST) or ``Annotated[T, "description"]``. A parameter annotated ``RunContext``
    receives the run's context and is left out of the schema. The result still calls like the
    function, so the function can be unit-tested directly.

    Sync functions run in one of daimon's worker threads, so a slow one never blocks the event
    loop; a thread cannot be stopped, so a sync tool that times out keeps running in the
    background. ``inline=True`` runs a sync function on the event loop's thread instead, saving
    the thread hop (tens of µs a call): only for functions that are always fast (no I/O, no
    locks, no heavy computing), since the whole process waits while one runs.

    Args:
        function: The function, when used as ``@tool`` or ``tool(fn)``.
        name: The tool's name; defaults to the function's name.
        description: What the tool does; defaults to the docstring's description.
        timeout: Seconds a call may take before it fails with a timeout error.
        retry_policy: Retries when the tool raises; defaults to the agent's policy.
        requires_approval: Pause the run before each call until a person approves or rejects it.
        effect: What a call does when it is in doubt (it started, and the process running it
            stopped before its result was recorded): ``"repeatable"`` (the default) runs it
            again, ``"keyed"`` runs it again with the same ``ctx.idempotency_key``, ``"once"``
            tells the model the outcome is unknown, ``"ask"`` pauses the run for a person. A run
            with a checkpoint store records each non-repeatable call's intent before it runs.
        inline: Run a sync function on the event loop's thread (it must be fast; no timeout).

    Raises:
        BuilderError: A type hint cannot be described in JSON Schema, or an option is invalid.

    Example::

        @tool(timeout=10)
        async def forecast(ctx: RunContext[Deps], city: Annotated[str, "In English"]) -> str:
            '''Get the weather forecast for a city.'''
            return await ctx.deps.weather.forecast(city)
    """
    # Names a tool's hints use may live in the decorating function's locals (a tool defined
    # inside a function with ``from __future__ import annotations``).
    localns = sys._getframe(1).f_locals  # read only, at decoration time

    def decorate(fn: Callable[P, R]) -> FunctionTool[P, R]:
        inner: Callable[P, R] = fn.function if isinstance(fn, FunctionTool) else fn
        return FunctionTool(
            inner,
            name=name,
            description=description,
            timeout=timeout,
            retry_policy=retry_policy,
            requires_approval=requires_approval,
            effect=effect,
            inline=inline,
            localns=localns,
        )

    return decorate if function is None else decorate(function)
