"""FunctionTool: a plain Python function, sync or async, made into a tool.

Everything about the function (its schema, descriptions and argument converters) is worked out
once, at decoration time; a call only converts the arguments that need it and runs the function.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import math
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar

from daimon.core.checkpoints import EFFECTS, Effect
from daimon.core.errors import BuilderError
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.tools._context import RunContext
from daimon.tools._convert import Converter, ConverterBuilder
from daimon.tools._docstrings import parse_doc
from daimon.tools._hints import UnsupportedTypeError, is_run_context, resolve_hints, type_name
from daimon.tools._output import to_output
from daimon.tools._retry import ToolRetryPolicy
from daimon.tools._schema import MISSING, SchemaBuilder, json_default
from daimon.tools._signals import ModelRetry
from daimon.tools._threads import run_in_thread

__all__ = ("FunctionTool", "UndocumentedToolWarning")

P = ParamSpec("P")
R = TypeVar("R")

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UNSUPPORTED_KINDS = {
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.VAR_KEYWORD: "**kwargs",
}


class FunctionTool(Generic[P, R]):
    """A function made into a tool by :func:`~daimon.tools.tool`; calling it calls the function.

    Args:
        function: The sync or async function.
        name: The tool's name; defaults to the function's name.
        description: What the tool does; defaults to the docstring's description.
        timeout: Seconds a call may take.
        retry_policy: Retries when the tool raises.
        requires_approval: Each call waits for a person's approval before it runs.
        effect: What a call in doubt does (see :data:`~daimon.core.Effect`).
        inline: Run a sync function on the event loop's thread instead of a worker thread.
        localns: Extra names for resolving string annotations (the decorating scope's locals).

    Raises:
        BuilderError: A hint has no JSON Schema, or an option is invalid.
    """

    __slots__ = (
        "__name__",
        "__qualname__",
        "__wrapped__",
        "_call",
        "_context_param",
        "_converters",
        "_direct",
        "_is_async",
        "_positional",
        "description",
        "effect",
        "function",
        "inline",
        "name",
        "parameters_schema",
        "requires_approval",
        "retry_policy",
        "spec",
        "timeout",
    )

    name: str
    """The name the model calls the tool by."""
    description: str
    """What the tool does, for the model."""
    parameters_schema: Mapping[str, Any]
    """JSON Schema of the arguments object (shared; do not mutate)."""
    spec: ToolSpec
    """The tool as offered to a model."""
    timeout: float | None
    """Seconds one call may take, or ``None`` for no limit."""
    retry_policy: ToolRetryPolicy | None
    """Retries for this tool, or ``None`` to use the agent's default."""
    requires_approval: bool
    """Whether each call waits for a person's approval before it runs."""
    effect: Effect
    """What a call does when it is in doubt (see :data:`~daimon.core.Effect`)."""
    inline: bool
    """Whether the sync function runs on the event loop's thread (blocking it while it runs)."""
    function: Callable[P, R]
    """The decorated function."""

    def __init__(
        self,
        function: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        retry_policy: ToolRetryPolicy | None = None,
        requires_approval: bool = False,
        effect: Effect = "repeatable",
        inline: bool = False,
        localns: Mapping[str, Any] | None = None,
    ) -> None:
        if inspect.isasyncgenfunction(function) or inspect.isgeneratorfunction(function):
            raise BuilderError(f"{_qualname(function)}: generator functions cannot be tools")
        self.function = function
        self._call: Callable[..., Any] = function
        self.name = name if name is not None else _default_name(function)
        if not _NAME.fullmatch(self.name):
            raise BuilderError(
                f"invalid tool name {self.name!r}: use 1-64 letters, digits, '_' or '-'"
            )
        self.timeout = _check_timeout(self.name, timeout)
        if retry_policy is not None and not isinstance(retry_policy, ToolRetryPolicy):
            raise BuilderError(f"tool {self.name!r}: retry_policy must be a ToolRetryPolicy")
        self.retry_policy = retry_policy
        self.requires_approval = bool(requires_approval)
        doc = parse_doc(inspect.getdoc(_unpartial(function)))
        self.description = description if description is not None else doc.description
        self._is_async = _is_async(function)
        self.inline = _check_inline(self.name, inline, self._is_async, self.timeout)
        self.parameters_schema = self._analyse(doc.params, localns)
        self.effect = _check_effect(self.name, effect, self._context_param)
        self.spec = ToolSpec(
            name=self.name, description=self.description, parameters=self.parameters_schema
        )
        self._direct = not (self._converters or self._context_param or self._positional)
        self.__name__ = getattr(function, "__name__", self.name)
        self.__qualname__ = getattr(function, "__qualname__", self.__name__)
        self.__wrapped__ = function

    def _analyse(
        self, param_docs: Mapping[str, str], localns: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        try:
            signature = inspect.signature(self.function)
            hints = resolve_hints(self.function, localns)
        except NameError as exc:
            raise BuilderError(f"tool {self.name!r}: cannot resolve a type hint: {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise BuilderError(f"tool {self.name!r}: cannot read its signature: {exc}") from exc
        schemas, converters = SchemaBuilder(localns), ConverterBuilder(localns)
        properties: dict[str, Any] = {}
        required: list[str] = []
        converted: list[tuple[str, Converter]] = []
        positional: list[str] = []
        self._context_param: str | None = None
        typed = False  # whether any parameter the model sees has a type hint
        for index, param in enumerate(signature.parameters.values()):
            if index == 0 and param.name in ("self", "cls") and param.annotation is param.empty:
                raise BuilderError(
                    f"tool {self.name!r}: looks like an unbound method ({param.name!r}); "
                    "make the tool from the bound method instead: tool(instance.method)"
                )
            if param.kind in _UNSUPPORTED_KINDS:
                raise BuilderError(
                    f"tool {self.name!r}: {_UNSUPPORTED_KINDS[param.kind]} parameters "
                    f"({param.name!r}) are not supported; declare each argument"
                )
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                positional.append(param.name)
            hint = hints.get(param.name, Any)
            if is_run_context(hint):
                if self._context_param is not None:
                    raise BuilderError(f"tool {self.name!r}: more than one RunContext parameter")
                self._context_param = param.name
                continue
            typed = typed or param.name in hints
            has_default = param.default is not inspect.Parameter.empty
            try:
                properties[param.name] = schemas.schema(
                    hint,
                    description=param_docs.get(param.name),
                    default=json_default(param.default) if has_default else MISSING,
                )
                converter = converters.converter(hint)
            except UnsupportedTypeError as exc:
                raise BuilderError(
                    f"tool {self.name!r}: parameter {param.name!r} ({type_name(hint)}): {exc}"
                ) from None
            if converter is not None:
                converted.append((param.name, converter))
            if not has_default:
                required.append(param.name)
        self._converters = tuple(converted)
        self._positional = tuple(positional)
        if not (self.description or param_docs or typed):
            _warn_undocumented(self.name)
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        if schemas.defs:
            schema["$defs"] = schemas.defs
        return schema

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r})"

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """Run the function with already-validated JSON arguments; its result as a ToolOutput."""
        if self._direct:
            if self._is_async:
                return to_output(await self._call(**arguments))
            return to_output(await self._run_sync((), arguments))
        args, kwargs = self._bind(arguments, ctx)
        if self._is_async:
            return to_output(await self._call(*args, **kwargs))
        return to_output(await self._run_sync(args, kwargs))

    async def _run_sync(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.inline:  # in a copy of the context, as in a thread: what it sets stays its own
            result = contextvars.copy_context().run(self._call, *args, **kwargs)
        else:
            result = await run_in_thread(self._call, args, kwargs)
        if inspect.isawaitable(result):  # a sync function that hands back a coroutine
            result = await result
        return result

    def _bind(
        self, arguments: Mapping[str, Any], ctx: RunContext[Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        kwargs = dict(arguments)
        for name, converter in self._converters:
            if name in kwargs:
                try:
                    kwargs[name] = converter(kwargs[name])
                except Exception as exc:  # the model sent a value the type rejects
                    raise ModelRetry(f"invalid value for argument {name!r}: {exc}") from exc
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        if not self._positional:
            return (), kwargs
        missing = [name for name in self._positional if name not in kwargs]
        if missing:
            raise ModelRetry(f"missing required argument {missing[0]!r}")
        return tuple(kwargs.pop(name) for name in self._positional), kwargs


def _is_async(function: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(function, "__call__", None)  # noqa: B004 - an object with async __call__
    return inspect.iscoroutinefunction(call)


def _unpartial(function: Callable[..., Any]) -> Callable[..., Any]:
    return function.func if isinstance(function, functools.partial) else function


class UndocumentedToolWarning(UserWarning):
    """A tool has neither a docstring nor type hints: the model sees only its name."""


def _warn_undocumented(name: str) -> None:
    """Warn, pointing at the code that made the tool (the first frame outside daimon)."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("daimon."):
        frame, level = frame.f_back, level + 1
    warnings.warn(
        f"tool {name!r} has neither a docstring nor type hints: the model gets an empty "
        "description to choose it by. Add a docstring saying what it does (or pass "
        "description=...) and type hints on its parameters.",
        UndocumentedToolWarning,
        stacklevel=level,
    )


def _default_name(function: Callable[..., Any]) -> str:
    name = getattr(_unpartial(function), "__name__", None)
    return name if isinstance(name, str) else type(function).__name__


def _qualname(function: Callable[..., Any]) -> str:
    return str(getattr(function, "__qualname__", function))


def _check_inline(name: str, inline: Any, is_async: bool, timeout: float | None) -> bool:
    if not isinstance(inline, bool):
        raise BuilderError(f"tool {name!r}: inline must be True or False")
    if inline and is_async:
        raise BuilderError(
            f"tool {name!r}: inline is for sync functions; an async one runs on the event loop"
        )
    if inline and timeout is not None:
        raise BuilderError(
            f"tool {name!r}: an inline tool cannot have a timeout: nothing can interrupt a "
            "function running on the event loop's thread"
        )
    return inline


def _check_effect(name: str, effect: Any, context_param: str | None) -> Effect:
    if effect not in EFFECTS:
        raise BuilderError(
            f"tool {name!r}: effect must be one of {', '.join(map(repr, EFFECTS))}, got {effect!r}"
        )
    if effect == "keyed" and context_param is None:
        raise BuilderError(
            f"tool {name!r}: a keyed tool passes ctx.idempotency_key to the service it calls; "
            "give it a RunContext parameter to read the key from"
        )
    return effect  # type: ignore[no-any-return]  # checked against EFFECTS above


def _check_timeout(name: str, timeout: Any) -> float | None:
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (0 < timeout < math.inf)
    ):
        raise BuilderError(f"tool {name!r}: timeout must be a positive number of seconds")
    return float(timeout)
