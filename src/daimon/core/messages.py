"""Conversation messages: roles, content parts and tool calls."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeAlias

from daimon.core._added import ADDED
from daimon.core._fastinit import fast_init

__all__ = (
    "Content",
    "ContentPart",
    "ImagePart",
    "Message",
    "Reasoning",
    "Role",
    "TextPart",
    "ToolCall",
)


class Role(StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """A piece of text inside a multi-part message."""

    text: str
    kind: Literal["text"] = field(default="text", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImagePart:
    """An image inside a user message, given by URL or by its bytes."""

    url: str | None = None
    """Where the provider can fetch the image (``https:`` or ``data:`` URL)."""
    data: bytes | None = None
    """The image itself, when there is no URL."""
    media_type: str = "image/png"
    """The MIME type of ``data``."""
    kind: Literal["image"] = field(default="image", init=False, repr=False)

    def __post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise ValueError("ImagePart needs exactly one of url or data")


ContentPart: TypeAlias = TextPart | ImagePart
Content: TypeAlias = str | tuple[ContentPart, ...]


@fast_init  # hot: one per tool call (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A model's request to run a tool.

    ``arguments`` holds the parsed JSON object, or the model's raw string when that string was not
    a valid JSON object, so the agent can tell the model exactly what was wrong.
    """

    id: str
    """The provider's id for this call; the tool result refers back to it."""
    name: str
    """The tool to run."""
    arguments: dict[str, Any] | str = field(default_factory=dict[str, Any])
    """Parsed arguments, or the raw text when it did not parse as a JSON object."""
    kind: Literal["tool_call"] = field(default="tool_call", init=False, repr=False)

    @classmethod
    def from_json(cls, id: str, name: str, raw: str) -> ToolCall:
        """Build a call from the model's raw argument text, keeping it raw if it is not JSON."""
        text = raw.strip()
        if not text:
            return cls(id=id, name=name, arguments={})
        try:
            parsed = json.loads(text, parse_constant=_refuse_constant)
        except ValueError:
            return cls(id=id, name=name, arguments=raw)
        if isinstance(parsed, dict):
            return cls(id=id, name=name, arguments=parsed)  # pyright: ignore[reportUnknownArgumentType]
        return cls(id=id, name=name, arguments=raw)

    @property
    def arguments_json(self) -> str:
        """The arguments as JSON text, as most providers want them back."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reasoning:
    """A model's reasoning as its provider returned it, kept to be given back on later turns.

    Reasoning models (OpenAI's through the Responses API) want their earlier reasoning back
    beside the tool calls it led to; the item is opaque (often encrypted) and only the provider
    that wrote it reads it. Other providers leave it out of their requests.
    """

    provider: str
    """The wire format ``data`` is in, e.g. ``"openai-responses"``."""
    text: str = ""
    """A readable summary of the reasoning, when the provider gives one."""
    data: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """The provider's own item (ids, encrypted content), sent back as it came."""
    kind: Literal["reasoning"] = field(default="reasoning", init=False, repr=False)


@fast_init  # hot: one per message (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message of a conversation."""

    role: Role
    """Who wrote it."""
    content: Content = ""
    """Plain text, or a tuple of parts (text and images)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls made by an assistant message."""
    tool_call_id: str | None = None
    """For a tool message: the id of the call it answers."""
    name: str | None = None
    """For a tool message: the name of the tool that produced it."""
    is_error: bool = False
    """For a tool message: whether the tool failed."""
    reasoning: tuple[Reasoning, ...] = field(default=(), metadata=ADDED)
    """For an assistant message: the model's reasoning before it, for the provider to reread."""
    kind: Literal["message"] = field(default="message", init=False, repr=False)

    @property
    def text(self) -> str:
        """The message's text, with any non-text parts left out."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message."""
        return cls(role=Role.SYSTEM, content=text)

    @classmethod
    def user(cls, content: str | Sequence[ContentPart]) -> Message:
        """A user message of text or parts."""
        return cls(role=Role.USER, content=content if isinstance(content, str) else tuple(content))

    @classmethod
    def assistant(
        cls,
        text: str = "",
        tool_calls: Sequence[ToolCall] = (),
        *,
        reasoning: Sequence[Reasoning] = (),
    ) -> Message:
        """An assistant message, with the tool calls it makes (and the reasoning behind it)."""
        if reasoning:
            return cls(
                role=Role.ASSISTANT,
                content=text,
                tool_calls=tuple(tool_calls),
                reasoning=tuple(reasoning),
            )
        return cls(role=Role.ASSISTANT, content=text, tool_calls=tuple(tool_calls))

    @classmethod
    def tool(
        cls, tool_call_id: str, content: str, *, name: str | None = None, is_error: bool = False
    ) -> Message:
        """A tool's result, answering the call with ``tool_call_id``."""
        return cls(
            role=Role.TOOL, content=content, tool_call_id=tool_call_id, name=name, is_error=is_error
        )


def _refuse_constant(name: str) -> object:
    # Python's json reads NaN and Infinity, which are not JSON: keep such arguments raw.
    raise ValueError(f"{name} is not JSON")
