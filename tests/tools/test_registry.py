from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from daimon.core.errors import BuilderError, DuplicateToolError
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.tools import FunctionTool, RunContext, Tool, ToolRegistry, tool
from daimon.tools import _validation as validation


@tool
def alpha(x: int) -> int:
    """First."""
    return x


@tool
async def beta(y: str) -> str:
    """Second."""
    return y


class EchoTool:
    """A hand-written tool: anything with the Tool members works."""

    name = "echo"
    description = "Echo the text back."
    parameters_schema: Mapping[str, Any] = MappingProxyType(
        {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        }
    )

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        return ToolOutput.text(arguments["text"])


def test_function_tools_and_custom_tools() -> None:
    echo = EchoTool()
    registry = ToolRegistry([alpha, beta, echo])
    assert len(registry) == 3
    assert registry.names == ("alpha", "beta", "echo")
    assert list(registry) == [alpha, beta, echo]
    assert registry.get("echo") is echo
    assert registry.get("missing") is None
    assert "alpha" in registry
    assert "missing" not in registry
    assert isinstance(echo, Tool)
    assert repr(registry) == "ToolRegistry(['alpha', 'beta', 'echo'])"


def test_empty_registry() -> None:
    registry = ToolRegistry()
    assert len(registry) == 0
    assert registry.names == ()
    assert registry.specs == ()


def test_plain_functions_are_wrapped() -> None:
    def gamma(z: float) -> float:
        """Third."""
        return z

    registry = ToolRegistry([gamma])
    wrapped = registry.get("gamma")
    assert isinstance(wrapped, FunctionTool)
    assert wrapped.function is gamma
    assert wrapped.description == "Third."


def test_plain_functions_are_wrapped_once() -> None:
    def delta(z: int) -> int:
        return z

    first = ToolRegistry([delta]).get("delta")
    second = ToolRegistry([delta]).get("delta")
    assert first is second


def test_a_functools_wrapper_is_not_confused_with_the_function_it_wraps() -> None:
    import functools

    def base(x: int) -> int:
        return x

    ToolRegistry([base])

    @functools.wraps(base)
    def doubled(x: int) -> int:
        return 2 * base(x)

    wrapped = ToolRegistry([doubled]).get("base")
    assert isinstance(wrapped, FunctionTool)
    assert wrapped.function is doubled
    assert wrapped(2) == 4


def test_bound_methods_are_wrapped_per_instance() -> None:
    class Counter:
        def __init__(self, start: int) -> None:
            self.start = start

        def count(self, by: int) -> int:
            return self.start + by

    one = ToolRegistry([Counter(1).count]).get("count")
    two = ToolRegistry([Counter(2).count]).get("count")
    assert isinstance(one, FunctionTool)
    assert isinstance(two, FunctionTool)
    assert (one(1), two(1)) == (2, 3)
    assert list(one.parameters_schema["properties"]) == ["by"]


def test_duplicate_names_are_rejected() -> None:
    @tool(name="alpha")
    def other(x: int) -> int:
        return x

    with pytest.raises(DuplicateToolError, match="alpha") as caught:
        ToolRegistry([alpha, other])
    assert caught.value.tool == "alpha"
    with pytest.raises(DuplicateToolError):
        ToolRegistry([alpha, alpha])


def test_things_that_are_not_tools_are_rejected() -> None:
    with pytest.raises(BuilderError, match="not a tool"):
        ToolRegistry([42])  # type: ignore[list-item]


def test_specs() -> None:
    echo = EchoTool()
    registry = ToolRegistry([alpha, echo])
    specs = registry.specs
    assert specs[0] is alpha.spec
    assert specs[1] == ToolSpec(
        name="echo", description="Echo the text back.", parameters=echo.parameters_schema
    )
    assert registry.specs is specs  # computed once


def test_construction_compiles_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[Any] = []
    monkeypatch.setattr(validation, "_compile", lambda schema: compiled.append(schema))
    ToolRegistry([alpha, beta, EchoTool()])
    assert compiled == []


def test_registry_accepts_any_iterable() -> None:
    registry = ToolRegistry(t for t in (alpha, beta))
    assert registry.names == ("alpha", "beta")
