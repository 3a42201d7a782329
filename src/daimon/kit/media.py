"""What the provider mappings share about media parts and prompt-cache breakpoints.

Each provider maps :class:`~daimon.core.messages.ImagePart`, ``AudioPart`` and ``DocumentPart``
to its own wire format; these helpers read a part's bytes (from ``data`` or a base64 ``data:``
URL), build the refusal for a part a provider cannot take (before anything is sent), and the text
stand-in for media a provider cannot show inside a tool result.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Literal, TypeAlias

from daimon.core.errors import BuilderError, UnsupportedContentError
from daimon.core.messages import AudioPart, CachePoint, DocumentPart, ImagePart, MediaPart, Message

__all__ = (
    "CacheMode",
    "b64",
    "cache_mode",
    "data_url",
    "has_cache_points",
    "inline",
    "stand_in",
    "text_of",
    "unsupported",
)

CacheMode: TypeAlias = Literal["auto", "off"]
"""``"auto"``: the model places cache breakpoints itself unless the request holds
:class:`~daimon.core.messages.CachePoint` parts (then those are used); ``"off"``: none are sent,
hand-placed ones included."""


def cache_mode(value: object) -> CacheMode:
    """``value`` checked as a :data:`CacheMode`."""
    if value == "auto":
        return "auto"
    if value == "off":
        return "off"
    raise BuilderError(f"prompt_cache must be 'auto' or 'off', got {value!r}")


def has_cache_points(messages: Sequence[Message]) -> bool:
    """Whether any message holds a hand-placed :class:`CachePoint`."""
    return any(
        isinstance(part, CachePoint)
        for message in messages
        if not isinstance(message.content, str)
        for part in message.content
    )


def inline(part: MediaPart) -> tuple[str, bytes] | None:
    """The part's media type and bytes, when it holds them or is a base64 ``data:`` URL."""
    if part.data is not None:
        return part.media_type, part.data
    url = part.url or ""
    if url.startswith("data:") and ";base64," in url:
        media_type, _, encoded = url[5:].partition(";base64,")
        try:
            return media_type or part.media_type, base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise UnsupportedContentError(
                "daimon", part.kind, f"its data: URL is not valid base64 ({exc})"
            ) from exc
    return None


def b64(data: bytes) -> str:
    """``data`` as base64 text."""
    return base64.b64encode(data).decode("ascii")


def data_url(part: MediaPart) -> str | None:
    """The part as a URL: its own, or its bytes as a ``data:`` URL."""
    if part.url is not None:
        return part.url
    assert part.data is not None
    return f"data:{part.media_type};base64,{b64(part.data)}"


def text_of(part: DocumentPart) -> str | None:
    """A text document's text, when it is inline (bytes or a ``data:`` URL); else ``None``."""
    if not part.is_text:
        return None
    found = inline(part)
    return None if found is None else found[1].decode("utf-8", errors="replace")


def unsupported(provider: str, part: MediaPart, reason: str) -> UnsupportedContentError:
    """The refusal of a part ``provider`` cannot take, naming both."""
    return UnsupportedContentError(provider, _name(part), reason)


def stand_in(part: MediaPart) -> str:
    """What the model reads in place of media its provider cannot show in a tool result."""
    count = None if part.data is None else len(part.data)
    size = "" if count is None else f", {count} byte{'' if count == 1 else 's'}"
    name = f" {part.name!r}" if isinstance(part, DocumentPart) and part.name else ""
    return (
        f"[the tool returned {_article(part)}{name} ({part.media_type}{size}) that this model "
        "cannot see in a tool result]"
    )


def _name(part: MediaPart) -> str:
    if isinstance(part, ImagePart):
        return "image"
    if isinstance(part, AudioPart):
        return "audio"
    return "text document" if part.is_text else "document"


def _article(part: MediaPart) -> str:
    if isinstance(part, ImagePart):
        return "an image"
    if isinstance(part, AudioPart):
        return "an audio recording"
    return f"a {_name(part)}"
