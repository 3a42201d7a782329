"""Files in an AG-UI user message: its media parts as daimon's, within the server's limits.

AG-UI 1.0 gives a user message either text or a list of parts: ``text``, and the media parts
``image``, ``audio``, ``video`` and ``document``, each with a ``source`` that is inline
(``{"type": "data", "value": <base64>, "mimeType"}``), a URL (``{"type": "url", "value",
"mimeType"?}``) or a provider's file handle (``{"type": "file", ...}``). The prompt becomes
daimon's :class:`~daimon.core.messages.ImagePart` (``image/*``), ``AudioPart`` (``audio/*``)
or ``DocumentPart`` (``application/pdf`` and ``text/*``, named after ``metadata.filename``).

What is refused, before the run starts, each with a message naming the part:

- 415: a media type the server does not take (``ServerSettings.file_types``), a video, a part
  whose kind does not fit its media type (an ``image`` that is ``application/pdf``);
- 413: a file over ``ServerSettings.max_file_bytes``, or files over ``max_files_bytes`` together;
- 422: base64 that does not decode, a URL that is not ``http(s)`` or ``data:``, a provider file
  handle (the server cannot tell which provider issued it), a URL source without ``mimeType``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

from daimon.core.messages import ContentPart, MediaPart, Message, TextPart
from daimon.kit.media import accepts_media_type, media_essence, media_part
from daimon.server._settings import ServerSettings

__all__ = ("MediaRefused", "user_prompt")


class MediaRefused(Exception):
    """A user message's file the server will not take: the status and kind of the 4xx."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def user_prompt(content: str | Sequence[Any], settings: ServerSettings) -> str | Message:
    """The prompt of a user message: its text, or a user :class:`Message` when it has files.

    Raises:
        MediaRefused: A part the server will not take (see the module docstring).
    """
    if isinstance(content, str):
        return content
    parts: list[ContentPart] = []
    texts: list[str] = []
    total = 0
    for index, part in enumerate(content):
        if part.type == "text":
            texts.append(part.text)
            continue
        media = _media(part, f"messages[-1].content[{index}]", settings)
        size = 0 if media.data is None else len(media.data)
        total += size
        if total > settings.max_files_bytes:
            raise MediaRefused(
                413,
                "payload_too_large",
                f"the message's files come to more than {settings.max_files_bytes} bytes "
                "together (ServerSettings.max_files_bytes)",
            )
        parts.append(media)
    if not parts:
        return "".join(texts)
    text = "".join(texts)
    return Message.user([TextPart(text=text), *parts] if text else parts)


def _media(part: Any, where: str, settings: ServerSettings) -> MediaPart:
    """One media part as daimon's, checked against the limits."""
    source = part.source
    if part.type == "video":
        raise MediaRefused(
            415, "unsupported_media_type", f"{where}: video is not supported (send a file)"
        )
    if source.type == "file":
        raise MediaRefused(
            422,
            "invalid_request",
            f"{where}: a provider's file handle cannot be used here: send the bytes "
            "(a 'data' source) or a URL",
        )
    media_type = media_essence(source.mime_type or "")
    if not media_type:
        raise MediaRefused(422, "invalid_request", f"{where}.source: mimeType is required")
    _check_type(part.type, media_type, where, settings)
    if source.type == "data":
        data = _decode(source.value, where, settings)
        return media_part(media_type, data=data, name=_filename(part))
    url = source.value
    if url.startswith("data:"):
        head, _, encoded = url.partition(",")
        if not head.endswith(";base64"):
            raise MediaRefused(
                422, "invalid_request", f"{where}.source: a data: URL must be base64 (;base64,)"
            )
        data = _decode(encoded, where, settings)
        return media_part(media_type, data=data, name=_filename(part))
    if not url.startswith(("https://", "http://")):
        raise MediaRefused(
            422,
            "invalid_request",
            f"{where}.source: the URL must be http(s) or data:, got {url[:40]!r}",
        )
    return media_part(media_type, url=url, name=_filename(part))


_KINDS = {"image": ("image/",), "audio": ("audio/",), "document": ("application/pdf", "text/")}


def _check_type(kind: str, media_type: str, where: str, settings: ServerSettings) -> None:
    if not accepts_media_type(media_type, settings.file_types):
        raise MediaRefused(
            415,
            "unsupported_media_type",
            f"{where}: {media_type} files are not accepted; accepted: "
            f"{', '.join(settings.file_types)}",
        )
    if not media_type.startswith(_KINDS[kind]):
        raise MediaRefused(
            415,
            "unsupported_media_type",
            f"{where}: a part of type {kind!r} cannot hold {media_type}",
        )


def _decode(value: str, where: str, settings: ServerSettings) -> bytes:
    """The bytes of base64 ``value``; too many (judged before decoding) is 413."""
    limit = settings.max_file_bytes
    if (len(value) // 4) * 3 - 2 > limit:
        raise _too_big(where, limit)
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise MediaRefused(
            422, "invalid_request", f"{where}.source.value: not valid base64"
        ) from None
    if len(data) > limit:
        raise _too_big(where, limit)
    return data


def _too_big(where: str, limit: int) -> MediaRefused:
    return MediaRefused(
        413,
        "payload_too_large",
        f"{where}: the file is larger than {limit} bytes (ServerSettings.max_file_bytes)",
    )


def _filename(part: Any) -> str | None:
    metadata = part.metadata
    if isinstance(metadata, dict):
        name = metadata.get("filename")
        if isinstance(name, str) and name:
            return name[:255]
    return None
