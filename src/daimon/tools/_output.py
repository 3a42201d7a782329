"""Turning what a tool function returns into the ToolOutput the model reads."""

from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from typing import Any

from daimon.core.errors import SerializationError
from daimon.core.messages import AudioPart, DocumentPart, ImagePart, TextPart
from daimon.core.tools import ToolOutput

__all__ = ("to_output", "to_plain")

_MEDIA = (ImagePart, AudioPart, DocumentPart)
_MEDIA_TYPES = frozenset(_MEDIA)
_PARTS = (TextPart, ImagePart, AudioPart, DocumentPart)


def to_output(result: Any) -> ToolOutput:
    """``ToolOutput`` as is; ``str`` as text; ``None`` as empty text; anything else as JSON.

    An image, audio or document part, or a list of such parts and text parts, becomes a result
    with media the model sees (its text parts joined as the text).
    """
    if type(result) is str:
        return ToolOutput(content=result)
    if isinstance(result, ToolOutput):
        return result
    if result is None:
        return ToolOutput(content="")
    kind = type(result)  # by exact type: a check per tool call that returns a number is cheap
    if kind in _MEDIA_TYPES:
        return ToolOutput(content="", media=(result,))
    if (kind is list or kind is tuple) and result and all(isinstance(p, _PARTS) for p in result):
        text = "".join(p.text for p in result if isinstance(p, TextPart))
        media = tuple(p for p in result if isinstance(p, _MEDIA))
        return ToolOutput(content=text, media=media)
    if isinstance(result, Enum):
        return to_output(result.value)
    if isinstance(result, str):
        return ToolOutput(content=str(result))
    try:
        plain = to_plain(result)
    except RecursionError:  # as ToolOutput.json reports it: an error result the model reads
        raise SerializationError(
            "cannot encode the tool result: it is nested too deeply, or contains itself"
        ) from None
    return ToolOutput.json(plain)  # which makes the data strict JSON (see ToolOutput)


def to_plain(obj: Any) -> Any:
    """Plain JSON data for ``obj``: dataclasses, pydantic models, enums and sets converted.

    Other values are left as they are; :class:`ToolOutput` makes them strict JSON.
    """
    if obj is None or type(obj) in (str, int, float, bool):
        return obj
    if isinstance(obj, Enum):
        return to_plain(obj.value)
    if isinstance(obj, dict):
        return {_plain_key(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_plain(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    # datetime and uuid are not imported here: a value of their types means they are loaded.
    dt = sys.modules.get("datetime")
    if dt is not None and isinstance(obj, dt.date | dt.time):  # datetime is a date
        return obj.isoformat()
    uuid = sys.modules.get("uuid")
    if uuid is not None and isinstance(obj, uuid.UUID):
        return str(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, type):  # a pydantic model
        return dump(mode="json")
    return obj


def _plain_key(key: Any) -> Any:
    if isinstance(key, Enum):
        key = key.value
    return key if key is None or type(key) in (str, int, float, bool) else str(key)
