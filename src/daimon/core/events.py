"""Stream events, shared by model streams and agent streams.

A model stream yields text deltas, tool-call start/delta/end, reasoning items, usage and ends
with :class:`Done`.
An agent stream adds :class:`ToolResult` events and ends with a :class:`Done` carrying the
:class:`~daimon.core.results.AgentResponse`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from daimon.core._added import ADDED
from daimon.core._fastinit import fast_init
from daimon.core.chat import StopReason, Usage
from daimon.core.limits import Remaining
from daimon.core.messages import Reasoning, ToolCall
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput

__all__ = (
    "Done",
    "ErrorEvent",
    "RateLimitWait",
    "ReasoningEvent",
    "StreamEvent",
    "TextDelta",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolResult",
    "UsageEvent",
)


@fast_init  # hot: one per streamed delta (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of assistant text, streamed as it arrives."""

    text: str
    kind: Literal["text_delta"] = field(default="text_delta", init=False, repr=False)


@fast_init  # hot: one per streamed tool call (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStart:
    """The model began a tool call."""

    call_id: str
    name: str
    index: int = 0
    """Position of the call in the turn, for providers that stream several at once."""
    kind: Literal["tool_call_start"] = field(default="tool_call_start", init=False, repr=False)


@fast_init  # hot: one per streamed argument chunk (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """A piece of a tool call's JSON arguments."""

    call_id: str
    arguments_delta: str
    index: int = 0
    kind: Literal["tool_call_delta"] = field(default="tool_call_delta", init=False, repr=False)


@fast_init  # hot: one per streamed tool call (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEnd:
    """A tool call is complete."""

    call: ToolCall
    index: int = 0
    kind: Literal["tool_call_end"] = field(default="tool_call_end", init=False, repr=False)


@fast_init  # hot: one per streamed tool result (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """A tool ran (agent streams only)."""

    call_id: str
    name: str
    output: ToolOutput
    duration: float = 0.0
    """Seconds the call took."""
    kind: Literal["tool_result"] = field(default="tool_result", init=False, repr=False)

    @property
    def is_error(self) -> bool:
        """Whether the tool failed."""
        return self.output.is_error


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningEvent:
    """A reasoning item the model finished (model streams only; it joins the assistant message).

    Agent streams leave it out: it is the provider's to read back, not an answer.
    """

    reasoning: Reasoning
    kind: Literal["reasoning"] = field(default="reasoning", init=False, repr=False)


@fast_init  # hot: one per streamed model call (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class UsageEvent:
    """Tokens used so far by this stream (models) or by the latest model call (agents)."""

    usage: Usage
    cost: float = 0.0
    kind: Literal["usage"] = field(default="usage", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent:
    """A failure reported in-band, for transports that cannot raise (SSE, brokers)."""

    message: str
    error_type: str = "DaimonError"
    kind: Literal["error"] = field(default="error", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimitWait:
    """A model call waited for its turn under shared rate limits (:mod:`daimon.limits`).

    Comes before the call's own events, once the call is admitted.
    """

    key: str
    """The limits' key (by default the model's name)."""
    waited: float
    """Seconds the call waited."""
    kind: Literal["rate_limit_wait"] = field(default="rate_limit_wait", init=False, repr=False)


@fast_init  # hot: one per run (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    """The stream is complete.

    A model stream sets ``stop_reason`` (and ``model``, and ``rate_limits`` when the provider
    sent rate-limit headers); an agent stream sets ``response``.
    """

    stop_reason: StopReason = StopReason.END_TURN
    model: str | None = None
    response: AgentResponse | None = None
    rate_limits: Remaining | None = field(default=None, metadata=ADDED)
    """What the provider's rate-limit headers said is left (model streams)."""
    kind: Literal["done"] = field(default="done", init=False, repr=False)


StreamEvent: TypeAlias = (
    TextDelta
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | ToolResult
    | ReasoningEvent
    | UsageEvent
    | ErrorEvent
    | RateLimitWait
    | Done
)
