"""The result of an agent run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from daimon.core.chat import Usage
from daimon.core.messages import Message

__all__ = ("AgentResponse",)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentResponse:
    """What a finished run returns."""

    text: str
    """The final answer."""
    messages: tuple[Message, ...] = ()
    """Every message of the run: the prompt, each model turn and each tool result."""
    iterations: int = 0
    """How many model calls the run made."""
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    """Dollars spent, when the agent has a cost model."""
    run_id: str = ""
    session_id: str | None = None
    output: Any = None
    """A typed result, for runs that ask for structured output."""
    kind: Literal["agent_response"] = field(default="agent_response", init=False, repr=False)
