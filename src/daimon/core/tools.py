"""What a model sees of a tool, and what a tool gives back."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from daimon.core._added import ADDED
from daimon.core._fastinit import fast_init
from daimon.core.errors import SerializationError
from daimon.core.messages import AudioPart, DocumentPart, ImagePart, MediaPart

__all__ = ("ToolOutput", "ToolSpec")

# Built once: json.dumps builds an encoder on every call. The data it encodes is already strict
# JSON (see ToolOutput), so allow_nan=False only guards that promise.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_quote = json.encoder.encode_basestring  # what _ENCODER writes for a str, without its overhead
_SURROGATE = re.compile("[\ud800-\udfff]")
_REPLACEMENT = "\ufffd"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool as offered to a model: its name, what it does and its JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments object."""
    kind: Literal["tool_spec"] = field(default="tool_spec", init=False, repr=False)


@fast_init  # hot: one per tool result (figures: core/_fastinit.py)
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    """A tool's result: the text the model reads, plus optional structured data.

    Whoever builds it, a ``ToolOutput`` holds only what every model, memory and checkpoint can
    take, so a result is read the same with or without persistence and never fails a run after
    its tool ran. The constructor makes it so: ``content`` is text, with any lone surrogate
    replaced by U+FFFD; ``data`` becomes strict JSON data, where what JSON cannot hold becomes
    its ``str()`` (a NaN ``"nan"``, an unknown object its text, a non-string key its JSON spelling
    or ``str()``), tuples become lists, and strings are made valid Unicode as ``content`` is.
    """

    content: str
    """What the model sees."""
    data: Any = None
    """Structured (JSON) data, when the tool returned some."""
    is_error: bool = False
    """Whether the tool failed; the model still reads ``content``."""
    media: tuple[MediaPart, ...] = field(default=(), metadata=ADDED)
    """Images, audio and documents the model sees after ``content`` (where its provider takes
    media in tool results; elsewhere a text stand-in says what was left out)."""
    kind: Literal["tool_output"] = field(default="tool_output", init=False, repr=False)

    def __post_init__(self) -> None:
        # The common cases (ASCII text; no data, an int or ASCII text) are checked in O(1).
        content = self.content
        if type(content) is not str or not content.isascii():
            _set_content(self, _text(content))
        if self.media:
            _set_media(self, _media(self.media))
        data = self.data
        kind = type(data)
        if data is None or kind is int or (kind is str and data.isascii()):
            return
        plain = json_data(data)
        if plain is not data:
            _set_data(self, plain)

    @classmethod
    def text(cls, text: str) -> ToolOutput:
        """A plain text result."""
        return cls(content=text)

    @classmethod
    def json(cls, data: Any) -> ToolOutput:
        """A JSON result; the model reads ``data`` (made strict JSON, see above) as JSON text."""
        kind = type(data)
        # An int's or a finite float's JSON is its repr, a string's is quoted by the encoder's
        # own function: skipping the encoder halves the cost of these, the common results.
        if kind is int or (kind is float and math.isfinite(data)):
            return cls(content=repr(data), data=data)
        if kind is str:
            text = data if data.isascii() else _valid_unicode(data)
            return cls(content=_quote(text), data=text)
        output = cls(content="", data=data)
        # The text comes from the data the constructor made strict, so both always agree.
        _set_content(output, _ENCODER.encode(output.data))
        return output

    @classmethod
    def with_media(cls, *media: MediaPart, text: str = "") -> ToolOutput:
        """A result of images, audio or documents, with optional text before them."""
        return cls(content=text, media=media)

    @classmethod
    def error(cls, message: str) -> ToolOutput:
        """A failure the model should read and react to."""
        return cls(content=message, is_error=True)


# The slots' own setters: the constructor fixes its fields in place, as a frozen class must.
_set_content = ToolOutput.__dict__["content"].__set__
_set_data = ToolOutput.__dict__["data"].__set__
_set_media = ToolOutput.__dict__["media"].__set__


def _media(media: object) -> tuple[MediaPart, ...]:
    """``media`` as a tuple of media parts; anything else is refused."""
    parts = tuple(media) if isinstance(media, list | tuple) else (media,)
    for part in parts:
        if not isinstance(part, ImagePart | AudioPart | DocumentPart):
            raise TypeError(
                f"ToolOutput media must be ImagePart, AudioPart or DocumentPart, got "
                f"{type(part).__name__}"
            )
    return parts


def _text(content: object) -> str:
    """``content`` as a plain ``str`` that UTF-8 can encode."""
    if not isinstance(content, str):
        raise TypeError(f"ToolOutput content must be a str, got {type(content).__name__}")
    return _valid_unicode(str.__str__(content))  # a str subclass as its plain text


def _valid_unicode(text: str) -> str:
    """``text`` with each surrogate code point (no UTF-8 store holds one) replaced by U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")  # faster than searching when, as almost always, there is none
    except UnicodeEncodeError:
        return _SURROGATE.sub(_REPLACEMENT, text)
    return text


def json_data(value: Any) -> Any:
    """``value`` as strict JSON data, read as ``json.dumps(value, default=str)`` reads it.

    The rule a ``ToolOutput``'s ``data`` follows (see the class), for any value that must be
    stored: NaN becomes ``"nan"``, an object its ``str()``, a lone surrogate U+FFFD.
    """
    try:
        return _plain(value)
    except RecursionError:
        raise SerializationError(
            "cannot encode the tool result: it is nested too deeply, or contains itself"
        ) from None


def _plain(value: Any) -> Any:
    # Checked in json.dumps's order, so a value of several kinds is read as JSON reads it.
    kind = type(value)
    if kind is str:
        return _valid_unicode(value)
    if value is None or kind is int or kind is bool:
        return value
    if kind is float:
        return value if math.isfinite(value) else str(value)
    if kind is list or kind is tuple:
        return [item if _is_plain(item) else _plain(item) for item in value]
    if kind is dict:
        return {
            key if type(key) is str and key.isascii() else _plain_key(key): (
                item if _is_plain(item) else _plain(item)
            )
            for key, item in value.items()
        }
    return _plain_subclass(value)


def _is_plain(value: Any) -> bool:
    """Whether ``value`` is strict JSON as it is: the common leaves, told apart in O(1)."""
    kind = type(value)
    return value is None or kind is int or kind is bool or (kind is str and value.isascii())


def _plain_subclass(value: Any) -> Any:
    """A subclass of a JSON type as that type; anything else as its ``str()``."""
    if isinstance(value, str):
        return _valid_unicode(str.__str__(value))
    if isinstance(value, int):  # IntEnum and the like, as the number JSON writes
        return int.__int__(value)
    if isinstance(value, float):
        return _plain(float.__float__(value))
    if isinstance(value, (list, tuple)):
        return _plain(list(value))
    if isinstance(value, dict):
        return _plain(dict(value))
    return _valid_unicode(str(value))


def _plain_key(key: Any) -> str:
    """A key as JSON spells it (``1`` -> ``"1"``, ``None`` -> ``"null"``), else its ``str()``."""
    if isinstance(key, str):
        return _valid_unicode(str.__str__(key))
    if key is None or isinstance(key, bool):
        return "null" if key is None else "true" if key else "false"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return float.__repr__(key)
    return _valid_unicode(str(key))
