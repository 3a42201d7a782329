"""@tool and FunctionTool. This module uses string annotations on purpose (PEP 563)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from daimon.core.errors import BuilderError
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.tools import FunctionTool, ModelRetry, RunContext, Tool, ToolRetryPolicy, tool

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


@tool
async def shout(text: str) -> str:
    """Shout the text."""
    return text.upper()


def test_bare_decorator_makes_a_function_tool() -> None:
    assert isinstance(add, FunctionTool)
    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two numbers."
    assert add.timeout is None
    assert add.retry_policy is None
    assert add.parameters_schema["required"] == ["a"]


def test_decorated_function_still_calls_like_the_original() -> None:
    assert add(2, 3) == 5
    assert add(a=2) == 3


async def test_decorated_async_function_still_awaits_like_the_original() -> None:
    assert await shout("hi") == "HI"


def test_options_are_applied() -> None:
    policy = ToolRetryPolicy(max_retries=1)

    @tool(name="sum_numbers", description="Sums.", timeout=2, retry_policy=policy)
    def total(values: list[int]) -> int:
        """Ignored description."""
        return sum(values)

    assert total.name == "sum_numbers"
    assert total.description == "Sums."
    assert total.timeout == 2.0
    assert total.retry_policy is policy
    assert total([1, 2]) == 3


def test_tool_called_as_a_function_with_options() -> None:
    def double(x: int) -> int:
        return 2 * x

    wrapped = tool(double, name="twice")
    assert wrapped.name == "twice"
    assert wrapped.function is double


def test_redecorating_a_function_tool_wraps_the_original_function() -> None:
    renamed = tool(name="plus")(add)
    assert renamed.name == "plus"
    assert renamed.function is add.function


def test_spec_is_precomputed_and_shares_the_schema() -> None:
    assert isinstance(add.spec, ToolSpec)
    assert add.spec.name == "add"
    assert add.spec.description == "Add two numbers."
    assert add.spec.parameters is add.parameters_schema


def test_wrapper_keeps_the_function_identity() -> None:
    assert add.__name__ == "add"
    assert add.__wrapped__ is add.function
    assert list(inspect.signature(add).parameters) == ["a", "b"]
    assert repr(add) == "FunctionTool(name='add')"


def test_no_docstring_gives_an_empty_description() -> None:
    @tool
    def bare(x: int) -> int:
        return x

    assert bare.description == ""


@pytest.mark.parametrize("name", ["", "has space", "a" * 65, "dots.not.allowed"])
def test_invalid_names_are_rejected(name: str) -> None:
    with pytest.raises(BuilderError, match="invalid tool name"):
        tool(name=name)(add.function)


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan"), True, "1"])
def test_invalid_timeouts_are_rejected(timeout: Any) -> None:
    with pytest.raises(BuilderError, match="timeout"):
        tool(timeout=timeout)(add.function)


def test_invalid_retry_policy_is_rejected() -> None:
    with pytest.raises(BuilderError, match="retry_policy"):
        tool(retry_policy=3)(add.function)  # type: ignore[call-overload]


def test_var_args_are_rejected() -> None:
    def many(*values: int) -> int:
        return sum(values)

    def options(**values: int) -> int:
        return sum(values.values())

    with pytest.raises(BuilderError, match=r"\*args parameters \('values'\)"):
        tool(many)
    with pytest.raises(BuilderError, match=r"\*\*kwargs"):
        tool(options)


def test_generators_are_rejected() -> None:
    def numbers() -> Any:
        yield 1

    async def stream() -> Any:
        yield 1

    for function in (numbers, stream):
        with pytest.raises(BuilderError, match="generator"):
            tool(function)


def test_unresolvable_hint_is_a_builder_error() -> None:
    def broken(x: DoesNotExist) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(BuilderError, match="DoesNotExist"):
        tool(broken)


def test_hints_can_name_classes_local_to_the_decorating_function() -> None:
    @dataclass
    class Local:
        value: int

    @tool
    def use(item: Local) -> int:
        return item.value

    assert use.parameters_schema["$defs"]["Local"]["required"] == ["value"]


# ------------------------------------------------------------------ RunContext


def test_run_context_is_left_out_of_the_schema_in_any_position() -> None:
    @tool
    def first(ctx: RunContext[str], x: int) -> str:
        return ctx.deps * x

    @tool
    def middle(x: int, ctx: RunContext[Any], y: int) -> int:
        return x + y

    @tool
    def last(x: int, context: RunContext) -> int:  # type: ignore[type-arg]
        return x

    assert list(first.parameters_schema["properties"]) == ["x"]
    assert list(middle.parameters_schema["properties"]) == ["x", "y"]
    assert middle.parameters_schema["required"] == ["x", "y"]
    assert list(last.parameters_schema["properties"]) == ["x"]


async def test_run_context_is_injected() -> None:
    seen: list[RunContext[str]] = []

    @tool
    async def whoami(x: int, ctx: RunContext[str]) -> str:
        seen.append(ctx)
        return f"{ctx.deps}:{x}"

    context = RunContext(run_id="r", deps="alice")
    out = await whoami.execute({"x": 1}, context)
    assert out.content == "alice:1"
    assert seen == [context]


async def test_run_context_is_injected_into_sync_tools() -> None:
    @tool
    def deps_of(ctx: RunContext[int]) -> int:
        """A test tool: deps of."""
        return ctx.deps

    out = await deps_of.execute({}, RunContext(run_id="r", deps=41))
    assert out.content == "41"


def test_two_run_context_parameters_are_rejected() -> None:
    def twice(a: RunContext[Any], b: RunContext[Any]) -> None:
        return None

    with pytest.raises(BuilderError, match="more than one RunContext"):
        tool(twice)


async def test_positional_only_parameters_are_passed_positionally(
    ctx: RunContext[None],
) -> None:
    @tool
    def power(base: int, /, exp: int = 2) -> int:
        return int(base**exp)

    assert (await power.execute({"base": 3}, ctx)).content == "9"
    with pytest.raises(ModelRetry, match="missing required argument 'base'"):
        await power.execute({"exp": 3}, ctx)


# ------------------------------------------------------------------ execution


async def test_sync_tools_run_off_the_event_loop_thread(ctx: RunContext[None]) -> None:
    @tool
    def where() -> int:
        """A test tool: where."""
        return threading.get_ident()

    loop_thread = threading.get_ident()
    out = await where.execute({}, ctx)
    assert int(out.content) != loop_thread


async def test_async_tools_run_on_the_event_loop(ctx: RunContext[None]) -> None:
    @tool
    async def where() -> int:
        """A test tool: where."""
        asyncio.get_running_loop()
        return threading.get_ident()

    out = await where.execute({}, ctx)
    assert int(out.content) == threading.get_ident()


async def test_inline_sync_tools_run_on_the_event_loop_thread(ctx: RunContext[None]) -> None:
    @tool(inline=True)
    def where() -> int:
        """A test tool: where."""
        return threading.get_ident()

    assert where.inline is True
    assert add.inline is False
    out = await where.execute({}, ctx)
    assert int(out.content) == threading.get_ident()


async def test_inline_tools_see_the_callers_context_and_keep_their_own_changes(
    ctx: RunContext[None],
) -> None:
    @tool(inline=True)
    def read_and_set() -> str:
        """A test tool: read and set."""
        seen = REQUEST_ID.get()
        REQUEST_ID.set("set by the tool")
        return seen

    token = REQUEST_ID.set("req-7")
    try:
        assert (await read_and_set.execute({}, ctx)).content == "req-7"
        assert REQUEST_ID.get() == "req-7"
    finally:
        REQUEST_ID.reset(token)


async def test_inline_sync_function_returning_a_coroutine_is_awaited(
    ctx: RunContext[None],
) -> None:
    async def later() -> str:
        return "done"

    @tool(inline=True)
    def kick() -> Any:
        """A test tool: kick."""
        return later()

    assert (await kick.execute({}, ctx)).content == "done"


def test_inline_is_validated() -> None:
    def fast() -> int:
        """A test tool: fast."""
        return 1

    async def coroutine() -> int:
        """A test tool: coroutine."""
        return 1

    with pytest.raises(BuilderError, match="inline must be True or False"):
        tool(fast, inline=1)  # type: ignore[call-overload]
    with pytest.raises(BuilderError, match="inline is for sync functions"):
        tool(coroutine, inline=True)
    with pytest.raises(BuilderError, match="cannot have a timeout"):
        tool(fast, inline=True, timeout=1)


async def test_async_callable_objects_are_awaited(ctx: RunContext[None]) -> None:
    class Greeter:
        async def __call__(self, name: str) -> str:
            return f"hello {name}"

    greet = tool(Greeter(), name="greet")
    assert (await greet.execute({"name": "bo"}, ctx)).content == "hello bo"


async def test_sync_function_returning_a_coroutine_is_awaited(ctx: RunContext[None]) -> None:
    async def later() -> str:
        return "done"

    @tool
    def kick() -> Any:
        """A test tool: kick."""
        return later()

    assert (await kick.execute({}, ctx)).content == "done"


async def test_returned_tool_output_is_kept(ctx: RunContext[None]) -> None:
    @tool
    def custom() -> ToolOutput:
        """A test tool: custom."""
        return ToolOutput.error("nope")

    assert await custom.execute({}, ctx) == ToolOutput.error("nope")


def test_unbound_methods_are_rejected_with_a_hint() -> None:
    class Service:
        def lookup(self, key: str) -> str:
            return key

    with pytest.raises(BuilderError, match=r"tool\(instance.method\)"):
        tool(Service.lookup)
    assert tool(Service().lookup)("k") == "k"


def test_static_methods_and_partials_keep_their_hints() -> None:
    import functools

    class Maths:
        @staticmethod
        def scale(x: int, factor: float) -> float:
            return x * factor

    scaled = tool(Maths.__dict__["scale"], name="scale")
    assert scaled.parameters_schema["properties"]["factor"] == {"type": "number"}
    halve = tool(functools.partial(Maths.scale, factor=0.5), name="halve")
    assert halve.parameters_schema["properties"]["x"] == {"type": "integer"}
    assert halve(4) == 2.0


def test_run_context_with_deps_only_known_to_type_checkers() -> None:
    @tool
    def f(ctx: RunContext[OnlyForTypeCheckers], x: int) -> int:  # type: ignore[name-defined]  # noqa: F821
        return x

    assert list(f.parameters_schema["properties"]) == ["x"]


def test_unresolvable_hint_names_the_parameter() -> None:
    def f(ok: int, bad: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(BuilderError, match="'bad'"):
        tool(f)


def test_unresolvable_return_annotation_is_ignored() -> None:
    def f(x: int) -> Missing:  # type: ignore[name-defined]  # noqa: F821
        return None

    assert tool(f).parameters_schema["required"] == ["x"]
