"""An agent's ``tool_choice``: what it may be, and whether a run's tools can honour it.

A run sends its ``tool_choice`` with each model call until the model calls a tool; after that
the model chooses again (the provider's default), so ``"required"`` or a tool's name makes the
first call use a tool without forcing a call on every turn, and ``"none"`` holds for the run.
"""

from __future__ import annotations

from collections.abc import Sequence

from daimon.core.errors import BuilderError
from daimon.core.messages import Message
from daimon.core.tools import ToolSpec

__all__ = ("called_a_tool", "check_tool_choice", "checked_tool_choice")


def checked_tool_choice(choice: object) -> str:
    """``choice``, if it can be a ``tool_choice``: a non-empty string.

    Raises:
        BuilderError: ``choice`` is not a string, or is empty.
    """
    if not isinstance(choice, str) or not choice:
        raise BuilderError(
            f"tool_choice must be 'auto', 'none', 'required' or a tool's name, got {choice!r}"
        )
    return choice


def check_tool_choice(choice: str, tools: Sequence[ToolSpec]) -> None:
    """Refuse a ``tool_choice`` that the run's ``tools`` cannot honour.

    Raises:
        BuilderError: ``choice`` asks for a tool call and there are no tools, or it names a tool
            that is not among them.
    """
    if choice in ("auto", "none"):
        return
    names = [spec.name for spec in tools]
    if not names:
        raise BuilderError(f"tool_choice {choice!r} asks for a tool call, but the run has no tools")
    if choice != "required" and choice not in names:
        raise BuilderError(
            f"tool_choice {choice!r} names no tool of the run; its tools: {', '.join(names)}"
        )


def called_a_tool(messages: Sequence[Message]) -> bool:
    """Whether any of ``messages`` is a model turn that called a tool."""
    return any(message.tool_calls for message in messages)
