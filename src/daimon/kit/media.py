"""What the provider mappings share about media parts and prompt-cache breakpoints.

Each provider maps :class:`~daimon.core.messages.ImagePart`, ``AudioPart`` and ``DocumentPart``
to its own wire format; these helpers read a part's bytes (from ``data`` or a base64 ``data:``
URL), build the refusal for a part a provider cannot take (before anything is sent), and the text
stand-in for media a provider cannot show inside a tool result.

The servers that take files in a user message (AG-UI, A2A) share the limits here: the media
types accepted by default, the largest file and the most bytes of files one message may carry,
and the media part each accepted type becomes.
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
    "DEFAULT_FILE_TYPES",
    "DEFAULT_MAX_FILES_BYTES",
    "DEFAULT_MAX_FILE_BYTES",
    "accepts_media_type",
    "b64",
    "cache_mode",
    "check_file_limits",
    "data_url",
    "has_cache_points",
    "inline",
    "media_essence",
    "media_part",
    "stand_in",
    "text_of",
    "unsupported",
)

DEFAULT_FILE_TYPES = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "audio/wav",
    "audio/mpeg",
    "audio/mp4",
    "audio/ogg",
    "audio/webm",
    "audio/flac",
    "application/pdf",
    "text/*",
)
"""The media types a user message's files may have unless a server is told otherwise: what the
models take (images, audio, PDFs and text files)."""
DEFAULT_MAX_FILE_BYTES = 8 * 1024 * 1024
"""The largest file (decoded) a user message may carry unless a server is told otherwise."""
DEFAULT_MAX_FILES_BYTES = 16 * 1024 * 1024
"""The most bytes of files (decoded) one user message may carry together, by default."""

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


def check_file_limits(
    file_types: object,
    max_file_bytes: object = DEFAULT_MAX_FILE_BYTES,
    max_files_bytes: object = DEFAULT_MAX_FILES_BYTES,
) -> None:
    """Check a server's file limits: media type patterns and positive byte counts.

    Raises:
        BuilderError: A pattern that is not ``type/subtype`` (or ``type/*``), or a limit that
            is not a positive integer.
    """
    for name, value in (("max_file_bytes", max_file_bytes), ("max_files_bytes", max_files_bytes)):
        if type(value) is not int or value < 1:
            raise BuilderError(f"{name} must be a positive integer, got {value!r}")
    if not isinstance(file_types, tuple) or not all(isinstance(t, str) and t for t in file_types):
        raise BuilderError(f"file_types must be a tuple of non-empty strings, got {file_types!r}")
    for pattern in file_types:
        if pattern.count("/") != 1 or pattern.startswith("/") or pattern.endswith("/"):
            raise BuilderError(f"file_types: {pattern!r} is not a media type like 'image/png'")


def media_essence(media_type: str) -> str:
    """``type/subtype``, lower-cased, without parameters (``; charset=...``)."""
    essence = media_type.split(";", 1)[0].strip().lower()
    return "audio/wav" if essence == "audio/x-wav" else essence


def accepts_media_type(media_type: str, accepted: Sequence[str]) -> bool:
    """Whether ``media_type`` matches an accepted type (``type/subtype`` or ``type/*``)."""
    for pattern in accepted:
        if pattern.endswith("/*"):
            if media_type.startswith(pattern[:-1]):
                return True
        elif media_type == pattern:
            return True
    return False


def media_part(
    media_type: str,
    *,
    data: bytes | None = None,
    url: str | None = None,
    name: str | None = None,
) -> MediaPart:
    """The media part a file of ``media_type`` is: an image, a recording, else a document."""
    if media_type.startswith("image/"):
        return ImagePart(data=data, url=url, media_type=media_type)
    if media_type.startswith("audio/"):
        return AudioPart(data=data, url=url, media_type=media_type)
    return DocumentPart(data=data, url=url, media_type=media_type, name=name)


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
