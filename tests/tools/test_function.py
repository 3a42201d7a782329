"""FunctionTool's warning for a tool the model would know nothing about but its name."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from daimon import Agent
from daimon.models import ScriptedModel
from daimon.tools import RunContext, UndocumentedToolWarning, tool


def test_a_tool_without_docstring_or_type_hints_warns_where_it_is_made() -> None:
    def lookup(key):  # type: ignore[no-untyped-def]
        return key

    with pytest.warns(UndocumentedToolWarning) as caught:
        tool(lookup)
    (warning,) = caught
    assert str(warning.message) == (
        "tool 'lookup' has neither a docstring nor type hints: the model gets an empty "
        "description to choose it by. Add a docstring saying what it does (or pass "
        "description=...) and type hints on its parameters."
    )
    assert warning.filename == __file__  # the line that made the tool, not daimon's


def test_a_plain_function_given_to_agents_warns_once() -> None:
    def ping(ctx: RunContext[Any]) -> str:  # the context is not the model's to see
        return "pong"

    with pytest.warns(UndocumentedToolWarning, match="tool 'ping'") as caught:
        Agent(ScriptedModel(["hi"]), tools=[ping])
        Agent(ScriptedModel(["hi"]), tools=[ping])  # the same function: its tool is reused
    assert len(caught) == 1
    assert caught[0].filename == __file__


def _documented(x: Any) -> Any:
    """Echo x."""
    return x


def _typed(x: int) -> int:
    return x


def _args_only(x):  # type: ignore[no-untyped-def]
    """
    Args:
        x: What to echo.
    """
    return x


def _bare(x):  # type: ignore[no-untyped-def]
    return x


@pytest.mark.parametrize(
    ("function", "options"),
    [
        (_documented, {}),
        (_typed, {}),
        (_args_only, {}),
        (_bare, {"description": "Echo x."}),
    ],
    ids=["docstring", "type hints", "parameter docs", "description="],
)
def test_a_tool_the_model_is_told_about_does_not_warn(function: Any, options: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UndocumentedToolWarning)
        tool(function, **options)
