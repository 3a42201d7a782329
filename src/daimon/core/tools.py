"""What a model sees of a tool, and what a tool gives back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from daimon.core._fastinit import fast_init

__all__ = ("ToolOutput", "ToolSpec")

# json.dumps(data, ensure_ascii=False, default=str) builds this same encoder on every call; it
# keeps no state between calls, so one serves them all.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool as offered to a model: its name, what it does and its JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments object."""
    kind: Literal["tool_spec"] = field(default="tool_spec", init=False, repr=False)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    """A tool's result: the text the model reads, plus optional structured data."""

    content: str
    """What the model sees."""
    data: Any = None
    """Structured (JSON) data, when the tool returned some."""
    is_error: bool = False
    """Whether the tool failed; the model still reads ``content``."""
    kind: Literal["tool_output"] = field(default="tool_output", init=False, repr=False)

    @classmethod
    def text(cls, text: str) -> ToolOutput:
        """A plain text result."""
        return cls(content=text)

    @classmethod
    def json(cls, data: Any) -> ToolOutput:
        """A JSON result; the model reads it as JSON text."""
        # An int's JSON is its repr; skipping the encoder halves the cost of a numeric result.
        text = int.__repr__(data) if type(data) is int else _ENCODER.encode(data)
        return cls(content=text, data=data)

    @classmethod
    def error(cls, message: str) -> ToolOutput:
        """A failure the model should read and react to."""
        return cls(content=message, is_error=True)
