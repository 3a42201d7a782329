"""Conversation messages: roles, content parts and tool calls."""

from __future__ import annotations

import json
import mimetypes
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeAlias

from daimon.core._added import ADDED
from daimon.core._fastinit import fast_init

__all__ = (
    "AudioPart",
    "CachePoint",
    "Content",
    "ContentPart",
    "DocumentPart",
    "ImagePart",
    "MediaPart",
    "Message",
    "Reasoning",
    "Role",
    "TextPart",
    "ToolCall",
    "media_from_file",
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


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioPart:
    """A sound recording inside a user message (or a tool's result), by its bytes or a URL."""

    data: bytes | None = None
    """The recording itself."""
    url: str | None = None
    """Where the provider can fetch it (``https:``, ``gs:`` or ``data:`` URL), when it can."""
    media_type: str = "audio/wav"
    """The MIME type, e.g. ``audio/wav`` or ``audio/mpeg``."""
    kind: Literal["audio"] = field(default="audio", init=False, repr=False)

    def __post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise ValueError("AudioPart needs exactly one of url or data")


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentPart:
    """A document inside a user message (or a tool's result): a PDF or a plain text file."""

    data: bytes | None = None
    """The file's bytes (UTF-8 for text)."""
    url: str | None = None
    """Where the provider can fetch it (``https:``, ``s3:``, ``gs:`` or ``data:`` URL)."""
    media_type: str = "application/pdf"
    """``application/pdf``, ``text/plain`` or another ``text/*`` type."""
    name: str | None = None
    """The file name, for providers that show or require one."""
    kind: Literal["document"] = field(default="document", init=False, repr=False)

    def __post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise ValueError("DocumentPart needs exactly one of url or data")

    @property
    def is_text(self) -> bool:
        """Whether the document is plain text (a ``text/*`` media type)."""
        return self.media_type.startswith("text/")

    @classmethod
    def from_text(cls, text: str, *, name: str | None = None) -> DocumentPart:
        """A plain text document."""
        return cls(data=text.encode("utf-8"), media_type="text/plain", name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class CachePoint:
    """A prompt-cache breakpoint placed by hand: cache the prompt up to here.

    Put it in a message's parts after what should be cached. Providers with explicit cache
    breakpoints (Anthropic's ``cache_control``, Bedrock's ``cachePoint``) mark it there; others
    leave it out. When a request holds any, the model places none of its own.
    """

    kind: Literal["cache_point"] = field(default="cache_point", init=False, repr=False)


MediaPart: TypeAlias = ImagePart | AudioPart | DocumentPart
"""A part that is not text: what a tool may return beside its text."""
ContentPart: TypeAlias = TextPart | ImagePart | AudioPart | DocumentPart | CachePoint
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

    Reasoning models want their earlier reasoning back beside the tool calls it led to: OpenAI's
    reasoning items, Claude's thinking and redacted thinking blocks (on Anthropic and Bedrock),
    Gemini's thought signatures. The item is opaque (signed or encrypted) and only the wire
    format that wrote it reads it; other providers leave it out of their requests. An assistant
    message keeps its items in the order the model produced them, and a provider sends them
    back in that order ahead of the message's text and tool calls.
    """

    provider: str
    """The wire format ``data`` is in, e.g. ``"openai-responses"``, ``"anthropic"``."""
    text: str = ""
    """The reasoning's readable text or summary, when the provider gives one."""
    data: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """The provider's own item (signature, encrypted or redacted content), sent back as it came.

    JSON values only, so that it persists unchanged: binary data goes in as base64 text."""
    kind: Literal["reasoning"] = field(default="reasoning", init=False, repr=False)


@fast_init  # hot: one per message (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message of a conversation."""

    role: Role
    """Who wrote it."""
    content: Content = ""
    """Plain text, or a tuple of parts (text, images, audio, documents, cache points)."""
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
        cls,
        tool_call_id: str,
        content: str | Sequence[ContentPart],
        *,
        name: str | None = None,
        is_error: bool = False,
    ) -> Message:
        """A tool's result, answering the call with ``tool_call_id`` (text, or text and media)."""
        return cls(
            role=Role.TOOL,
            content=content if isinstance(content, str) else tuple(content),
            tool_call_id=tool_call_id,
            name=name,
            is_error=is_error,
        )

    @property
    def media(self) -> tuple[MediaPart, ...]:
        """The message's images, audio and documents, in order."""
        if isinstance(self.content, str):
            return ()
        return tuple(p for p in self.content if isinstance(p, ImagePart | AudioPart | DocumentPart))


_EXTRA_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".json": "text/plain",
    ".log": "text/plain",
    ".yaml": "text/plain",
    ".yml": "text/plain",
    ".toml": "text/plain",
    ".py": "text/plain",
    ".webp": "image/webp",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".flac": "audio/flac",
    ".ogg": "audio/ogg",
    ".m4a": "audio/mp4",
}


def media_from_file(path: str | os.PathLike[str], *, media_type: str | None = None) -> MediaPart:
    """An image, audio or document part holding a file's bytes, its type read from its name.

    Images (``image/*``) become :class:`ImagePart`, sound (``audio/*``) :class:`AudioPart`, PDFs
    and text files :class:`DocumentPart` (named after the file). Raises :class:`ValueError` for
    a type none of them takes; :class:`OSError` when the file cannot be read.
    """
    name = os.path.basename(os.fspath(path))
    extension = os.path.splitext(name)[1].lower()
    kind = media_type or _EXTRA_TYPES.get(extension) or mimetypes.guess_type(name)[0] or ""
    with open(path, "rb") as file:
        data = file.read()
    if kind.startswith("image/"):
        return ImagePart(data=data, media_type=kind)
    if kind.startswith("audio/"):
        return AudioPart(data=data, media_type="audio/wav" if kind == "audio/x-wav" else kind)
    if kind == "application/pdf" or kind.startswith("text/"):
        return DocumentPart(data=data, media_type=kind, name=name)
    raise ValueError(
        f"{name}: cannot tell what kind of file this is ({kind or 'unknown type'}); images, "
        "audio, PDFs and text files can be given to a model"
    )


def _refuse_constant(name: str) -> object:
    # Python's json reads NaN and Infinity, which are not JSON: keep such arguments raw.
    raise ValueError(f"{name} is not JSON")
