"""Files in an A2A message: its file parts as daimon's media parts, within the server's limits.

A2A 1.0 gives a file as a part holding its bytes (``raw``) or a ``url``, with its ``mediaType``
and maybe a ``filename``. Each becomes daimon's :class:`~daimon.core.messages.ImagePart`
(``image/*``), ``AudioPart`` (``audio/*``) or ``DocumentPart`` (``application/pdf`` and
``text/*``, named after ``filename``), with the limits AG-UI has (:mod:`daimon.kit.media`).
Text and data parts are not files: they are never refused here.

What is refused, before a task exists, each with a message naming the part:

- ``ContentTypeNotSupportedError`` (the spec's error): a media type the server does not take
  (``file_types``), or any file sent to a promptable that takes text only (a flow);
- ``InvalidParamsError``: a file without ``mediaType``, a file over ``max_file_bytes`` or files
  over ``max_files_bytes`` together, a URL that is neither ``http(s)`` nor a base64 ``data:``.
"""

from __future__ import annotations

from daimon.a2a import _sdk  # noqa: F401  # isort: skip - first: names the extra

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from a2a.types import Part
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError

from daimon.core.errors import UnsupportedContentError
from daimon.core.messages import MediaPart, TextPart
from daimon.core.messages import Message as ChatMessage
from daimon.core.protocols import Promptable
from daimon.kit.media import (
    accepts_media_type,
    check_file_limits,
    inline,
    media_essence,
    media_part,
)

__all__ = ("FileRules", "accepted_types", "file_rules", "input_modes", "prompt_of")

_TEXT = "text/plain"
_FILE_KINDS = ("raw", "url")


@dataclass(frozen=True, slots=True)
class FileRules:
    """The files a served promptable takes: their media types (none: text only) and sizes."""

    types: tuple[str, ...]
    max_file_bytes: int
    max_files_bytes: int


def accepted_types(agent: Promptable, file_types: Iterable[str]) -> tuple[str, ...]:
    """The media types of the files ``agent`` takes: none for a flow (text only).

    Raises:
        BuilderError: A media type that is not ``type/subtype`` (or ``type/*``).
    """
    from daimon.orchestration import Dag, Graph, PromptableFlow, Workflow

    types = tuple(file_types)
    check_file_limits(types)
    return () if isinstance(agent, (Graph, Dag, Workflow, PromptableFlow)) else types


def file_rules(
    agent: Promptable, file_types: Iterable[str], max_file_bytes: int, max_files_bytes: int
) -> FileRules:
    """The rules for the files ``agent`` is sent.

    Raises:
        BuilderError: A media type that is not ``type/subtype`` (or ``type/*``), or a limit
            that is not a positive integer.
    """
    types = accepted_types(agent, file_types)
    check_file_limits(types, max_file_bytes, max_files_bytes)
    return FileRules(types, max_file_bytes, max_files_bytes)


def input_modes(types: Iterable[str]) -> list[str]:
    """The media types an agent card lists as accepted: text, then the files'."""
    return [_TEXT, *types]


def prompt_of(text: str, parts: Sequence[Part], rules: FileRules) -> str | ChatMessage:
    """The prompt of a message: its ``text``, or a user message with its files too.

    Raises:
        ContentTypeNotSupportedError: A file of a media type ``rules`` do not take.
        InvalidParamsError: A file without a media type, too large, or at an unusable URL.
    """
    files: list[MediaPart] = []
    total = 0
    for index, part in enumerate(parts):
        if part.WhichOneof("content") not in _FILE_KINDS:
            continue
        media = _file(part, f"message.parts[{index}]", rules)
        total += 0 if media.data is None else len(media.data)
        if total > rules.max_files_bytes:
            raise InvalidParamsError(
                message=f"the message's files come to more than {rules.max_files_bytes} bytes "
                "together (max_files_bytes)"
            )
        files.append(media)
    if not files:
        return text
    return ChatMessage.user([TextPart(text=text), *files] if text else files)


def _file(part: Part, where: str, rules: FileRules) -> MediaPart:
    """One file part as daimon's, checked against ``rules``."""
    media_type = media_essence(part.media_type)
    if not rules.types:
        raise ContentTypeNotSupportedError(
            message=f"{where}: this agent takes text only (accepted: {_TEXT})"
        )
    if not media_type:
        raise InvalidParamsError(message=f"{where}: a file needs its mediaType")
    if not accepts_media_type(media_type, rules.types):
        raise ContentTypeNotSupportedError(
            message=f"{where}: {media_type} files are not accepted; accepted: "
            f"{', '.join(input_modes(rules.types))}"
        )
    name = part.filename[:255] or None
    if part.WhichOneof("content") == "raw":
        return _checked_size(media_part(media_type, data=part.raw, name=name), where, rules)
    url = part.url
    if url.startswith("data:"):
        return _checked_size(_from_data_url(media_type, url, name, where), where, rules)
    if not url.startswith(("https://", "http://")):
        raise InvalidParamsError(
            message=f"{where}: the URL must be http(s) or a base64 data: URL, got {url[:40]!r}"
        )
    return media_part(media_type, url=url, name=name)


def _from_data_url(media_type: str, url: str, name: str | None, where: str) -> MediaPart:
    try:
        found = inline(media_part(media_type, url=url, name=name))
    except UnsupportedContentError:
        found = None
    if found is None:
        raise InvalidParamsError(message=f"{where}: a data: URL must hold base64 (;base64,)")
    return media_part(media_type, data=found[1], name=name)


def _checked_size(media: MediaPart, where: str, rules: FileRules) -> MediaPart:
    if media.data is not None and len(media.data) > rules.max_file_bytes:
        raise InvalidParamsError(
            message=f"{where}: the file is larger than {rules.max_file_bytes} bytes "
            "(max_file_bytes)"
        )
    return media
