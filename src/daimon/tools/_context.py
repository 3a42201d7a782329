"""What a tool can know about the run that called it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage

__all__ = ("RunContext",)

DepsT = TypeVar("DepsT")


@dataclass(slots=True, kw_only=True)
class RunContext(Generic[DepsT]):
    """Handed to any tool that declares a parameter of this type; kept out of the tool's schema."""

    run_id: str
    """The run's id; stable across resumes."""
    deps: DepsT
    """What the caller passed as ``prompt(..., deps=...)``."""
    cancel: CancelToken = field(default_factory=CancelToken)
    """The run's cancel token; long tools may check it."""
    usage: Usage = field(default_factory=Usage)
    """Tokens used by the run so far."""
    call_id: str = ""
    """The id of the tool call being executed."""
    tool_name: str = ""
    session_id: str | None = None
    iteration: int = 0
    on_usage: Callable[[Usage, float], None] | None = field(default=None, repr=False)
    """Where :meth:`report_usage` sends usage (set by the agent loop)."""

    def report_usage(self, usage: Usage, cost: float = 0.0) -> None:
        """Add a sub-agent's (or any nested model call's) usage and cost to this run's totals."""
        if self.on_usage is not None:
            self.on_usage(usage, cost)

    @property
    def idempotency_key(self) -> str:
        """``run_id:call_id``: the same for a call and any retry or resumed re-delivery of it."""
        return f"{self.run_id}:{self.call_id}"
