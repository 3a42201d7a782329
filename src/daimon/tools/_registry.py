"""The tools an agent can use, by name, and the one way to run a tool call."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from daimon.core.errors import (
    BuilderError,
    DuplicateToolError,
    RunCancelled,
    SchemaValidationError,
    ToolNotFoundError,
)
from daimon.core.errors import TimeoutError as ToolTimeoutError
from daimon.core.messages import ToolCall
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.tools._context import RunContext
from daimon.tools._function import FunctionTool
from daimon.tools._protocol import Tool
from daimon.tools._retry import ToolRetryPolicy
from daimon.tools._signals import EndRun, ModelRetry
from daimon.tools._validation import Validator, describe_failure, validator_for

__all__ = ("ToolRegistry",)

_MAX_ERROR_CHARS = 2000
_MAX_RAW_CHARS = 200


class ToolRegistry:
    """An immutable set of tools, looked up by name.

    Construction is cheap: plain functions are wrapped with :func:`~daimon.tools.tool` (once
    per function), and schemas are compiled into validators only when a tool is first run.

    Raises:
        DuplicateToolError: Two tools share a name.
        BuilderError: Something given is neither a tool nor a function.
    """

    __slots__ = ("_names", "_specs", "_tools", "_validators")

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        registry: dict[str, Tool] = {}
        for item in tools:
            found = _as_tool(item)
            name = found.name
            if name in registry:
                raise DuplicateToolError(name)
            registry[name] = found
        self._tools = registry
        self._validators: dict[str, Validator] | None = None  # made on the first validated call
        self._names: tuple[str, ...] | None = None
        self._specs: tuple[ToolSpec, ...] | None = None

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"

    @property
    def names(self) -> tuple[str, ...]:
        """The tools' names, in the order they were given."""
        if self._names is None:
            self._names = tuple(self._tools)
        return self._names

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """What the model is told about each tool (computed on first use, then kept)."""
        if self._specs is None:
            self._specs = tuple(_spec_of(t) for t in self._tools.values())
        return self._specs

    async def run(
        self,
        call: ToolCall,
        ctx: RunContext[Any],
        *,
        validate: bool = True,
        retry_policy: ToolRetryPolicy | None = None,
    ) -> ToolOutput:
        """Run one tool call; every tool problem comes back as an error ``ToolOutput``.

        Unknown tools, arguments that are not a JSON object or do not match the schema, errors
        the tool raises (after retries), :class:`~daimon.tools.ModelRetry` and timeouts all
        become ``ToolOutput.error`` results the model can read and react to.

        Args:
            call: The model's call.
            ctx: The context handed to the tool (the caller fills ``call_id`` and
                ``tool_name``).
            validate: Check the arguments against the tool's schema first.
            retry_policy: Retries for tools that have no ``retry_policy`` of their own.

        Raises:
            asyncio.CancelledError: The task running the call was cancelled.
            RunCancelled: The tool itself raised it to honour the run's cancel token.
        """
        found = self._tools.get(call.name)
        if found is None:
            return ToolOutput.error(f"Error: {ToolNotFoundError(call.name, self.names)}")
        arguments = self._checked(call, found, validate)
        if isinstance(arguments, ToolOutput):
            return arguments
        policy = getattr(found, "retry_policy", None) or retry_policy
        seconds: float | None = getattr(found, "timeout", None)
        # Every call's one path: attempts under the timeout (if any), retried as the policy says.
        # Written out here, not in a helper coroutine, whose frame cost 0.2-0.5 µs a call against
        # nothing measurable this way (CHANGELOG.md, "The registry's one path").
        attempt = 0
        while True:
            deadline = asyncio.timeout(seconds) if seconds is not None else None
            try:
                if deadline is None:
                    return await found.execute(arguments, ctx)
                async with deadline:
                    return await found.execute(arguments, ctx)
            except ModelRetry as exc:
                return ToolOutput.error(exc.message)
            except (RunCancelled, EndRun):
                raise
            except Exception as exc:  # the model reads what went wrong
                timed_out = deadline is not None and deadline.expired()
                error = _timed_out(found.name, seconds) if timed_out else exc
                output = ToolOutput.error(f"Error: {error}") if timed_out else _failed(exc)
                if policy is None or not _should_retry(policy, error, attempt, ctx):
                    return output
            attempt += 1
            delay = policy.backoff(attempt)
            if delay > 0:
                await asyncio.sleep(delay)
            if ctx.cancel.cancelled:  # stop retrying once the run is cancelled
                return output

    def _checked(self, call: ToolCall, found: Tool, validate: bool) -> dict[str, Any] | ToolOutput:
        """The call's arguments, or the error result saying why the tool cannot take them."""
        arguments = call.arguments
        if isinstance(arguments, str):
            return _not_an_object(call.name, arguments)
        if not validate:
            return arguments
        validators = self._validators
        validator = validators.get(call.name) if validators is not None else None
        if validator is None:
            validator = self._validator(call.name, found)
        try:
            validator(arguments)
        except Exception as exc:  # any failure is reported to the model
            error = SchemaValidationError(
                call.name, [describe_failure(exc, found.parameters_schema)]
            )
            return ToolOutput.error(f"Error: {error}")
        return arguments

    def _validator(self, name: str, found: Tool) -> Validator:
        validator = validator_for(found.parameters_schema)
        if self._validators is None:
            self._validators = {}
        self._validators[name] = validator
        return validator


def _should_retry(
    policy: ToolRetryPolicy, error: Exception, attempt: int, ctx: RunContext[Any]
) -> bool:
    if attempt >= policy.max_retries or ctx.cancel.cancelled:
        return False
    try:
        return policy.is_retryable(error)
    except Exception:  # a faulty retry_on predicate must not turn into a crash
        return False


def _timed_out(name: str, seconds: float | None) -> ToolTimeoutError:
    return ToolTimeoutError(seconds or 0.0, f"tool {name!r}")


def _failed(exc: BaseException) -> ToolOutput:
    message = str(exc)
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + "... (truncated)"
    name = type(exc).__name__
    return ToolOutput.error(f"Error: {name}: {message}" if message else f"Error: {name}")


def _not_an_object(name: str, raw: str) -> ToolOutput:
    shown = raw if len(raw) <= _MAX_RAW_CHARS else raw[:_MAX_RAW_CHARS] + "..."
    return ToolOutput.error(
        f"Error: the arguments for tool {name!r} were not a valid JSON object; "
        f"received: {shown!r}. Call the tool again with a JSON object of arguments."
    )


def _as_tool(item: Tool | Callable[..., Any]) -> Tool:
    if isinstance(item, FunctionTool):
        return item
    if callable(getattr(item, "execute", None)) and hasattr(item, "name"):
        return item  # type: ignore[return-value]  # duck-typed Tool; isinstance(Tool) is slow
    if callable(item):
        return _wrap(item)
    raise BuilderError(
        f"{item!r} is not a tool: give a function, or an object with name, description, "
        "parameters_schema and execute"
    )


def _wrap(function: Callable[..., Any]) -> Tool:
    """``tool(function)``, cached on plain functions so agents built per request stay cheap."""
    if type(function) is not types.FunctionType:
        return FunctionTool(function)
    cached = function.__dict__.get("__daimon_tool__")
    # functools.wraps copies __dict__, so a wrapper may carry the wrapped function's tool.
    if isinstance(cached, FunctionTool) and cached.function is function:
        return cached
    wrapped = FunctionTool(function)
    function.__dict__["__daimon_tool__"] = wrapped
    return wrapped


def _spec_of(found: Tool) -> ToolSpec:
    spec = getattr(found, "spec", None)
    if isinstance(spec, ToolSpec):
        return spec
    return ToolSpec(
        name=found.name, description=found.description, parameters=found.parameters_schema
    )
