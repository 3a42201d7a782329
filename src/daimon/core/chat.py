"""Model requests and responses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal

from daimon.core._added import ADDED
from daimon.core._fastinit import fast_init, fast_new
from daimon.core.limits import Remaining
from daimon.core.messages import Message, ToolCall
from daimon.core.tools import ToolSpec

__all__ = ("ChatRequest", "ChatResponse", "ResponseFormat", "StopReason", "Usage")

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class StopReason(StrEnum):
    """Why the model stopped."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    CONTENT_FILTER = "content_filter"


@fast_init  # hot: one or more per model call (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens used by one or more model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """Input tokens served from the provider's prompt cache (a subset of ``input_tokens``)."""
    requests: int = 0
    """How many model calls this usage covers."""
    reasoning_tokens: int = field(default=0, metadata=ADDED)
    """Output tokens the model spent reasoning (a subset of ``output_tokens``, billed as output)."""
    cache_write_tokens: int = field(default=0, metadata=ADDED)
    """Input tokens written to the provider's prompt cache (a subset of ``input_tokens``, billed
    at the provider's cache-write rate: Anthropic and Bedrock report them)."""
    kind: Literal["usage"] = field(default="usage", init=False, repr=False)

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        # Immutable, so a sum with the shared zero (a reply without usage, a run's start) is the
        # other operand itself: no new object (0.3 µs per model call of a run without usage).
        if other is _NO_USAGE:
            return self
        if self is _NO_USAGE:
            return other
        return _new_usage(  # Usage(...) without calling the class: see agent/_run.py's figures
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            requests=self.requests + other.requests,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


_NO_USAGE = Usage()  # immutable, so every reply without usage (and every run's start) shares one
_new_usage = fast_new(Usage)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseFormat:
    """Ask the model for JSON matching a schema (structured output)."""

    name: str
    schema: Mapping[str, Any]
    strict: bool = True
    kind: Literal["response_format"] = field(default="response_format", init=False, repr=False)


@fast_init  # hot: one per model call (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """Everything a model needs for one call."""

    messages: Sequence[Message]
    """The conversation so far, system message first when there is one."""
    tools: Sequence[ToolSpec] = ()
    """Tools the model may call."""
    temperature: float | None = None
    max_tokens: int | None = None
    response_format: ResponseFormat | None = None
    tool_choice: str | None = None
    """``"auto"``, ``"none"``, ``"required"`` or a tool name; ``None``: the provider's default."""
    settings: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Provider-specific settings, passed through untouched."""
    kind: Literal["chat_request"] = field(default="chat_request", init=False, repr=False)


@fast_init  # hot: one per model call (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class ChatResponse:
    """One model answer."""

    message: Message
    """The assistant message, with any tool calls."""
    stop_reason: StopReason = StopReason.END_TURN
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    """The model id the provider reports, used for pricing."""
    rate_limits: Remaining | None = field(default=None, metadata=ADDED)
    """What the provider's rate-limit headers said is left of its limits, when it sent them."""
    kind: Literal["chat_response"] = field(default="chat_response", init=False, repr=False)

    @classmethod
    def reply(
        cls, text: str, *, usage: Usage | None = None, model: str | None = None
    ) -> ChatResponse:
        """A final text answer."""
        return cls(message=Message.assistant(text), usage=usage or _NO_USAGE, model=model)

    @classmethod
    def tool_use(
        cls, *calls: ToolCall, text: str = "", usage: Usage | None = None, model: str | None = None
    ) -> ChatResponse:
        """A turn that calls tools."""
        return cls(
            message=Message.assistant(text, calls),
            stop_reason=StopReason.TOOL_USE,
            usage=usage or _NO_USAGE,
            model=model,
        )

    @property
    def text(self) -> str:
        """The answer's text."""
        return self.message.text

    @property
    def has_tool_calls(self) -> bool:
        """Whether the model asked for tools."""
        return bool(self.message.tool_calls)
