"""Structured output: the JSON Schema of an output type, and turning the model's answer into it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from daimon.core.chat import ResponseFormat
from daimon.core.errors import BuilderError
from daimon.core.tools import ToolSpec
from daimon.tools._convert import ConverterBuilder
from daimon.tools._hints import UnsupportedTypeError
from daimon.tools._schema import SchemaBuilder
from daimon.tools._validation import describe_failure, validator_for

__all__ = ("InvalidOutput", "OUTPUT_TOOL", "OutputSpec")

OUTPUT_TOOL = "final_result"
"""The name of the tool through which a model without native JSON output gives its answer."""


class InvalidOutput(Exception):
    """The model's answer does not match the output type (internal; the loop retries)."""


class OutputSpec:
    """An output type, compiled once: its schema, the output tool and the converter.

    Object types (dataclasses, TypedDicts, pydantic models) are the schema's root; any other type
    (``list[str]``, ``int``, ...) is wrapped as ``{"result": ...}`` because tools and JSON modes
    take objects only.
    """

    __slots__ = ("_convert", "output_type", "response_format", "schema", "tool_spec", "wrapped")

    def __init__(self, output_type: Any) -> None:
        builder = SchemaBuilder()
        try:
            schema = builder.schema(output_type)
        except UnsupportedTypeError as exc:
            raise BuilderError(f"output_type {output_type!r} has no JSON Schema: {exc}") from exc
        defs = builder.defs
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            schema = dict(defs[ref.removeprefix("#/$defs/")])
        self.wrapped = schema.get("type") != "object"
        if self.wrapped:
            schema = {
                "type": "object",
                "properties": {"result": schema},
                "required": ["result"],
                "additionalProperties": False,
            }
        if defs:
            schema["$defs"] = defs
        self.output_type = output_type
        self.schema: Mapping[str, Any] = schema
        self._convert = ConverterBuilder().converter(output_type)
        name = getattr(output_type, "__name__", "output")
        self.tool_spec = ToolSpec(
            name=OUTPUT_TOOL,
            description=f"Give your final answer ({name}). Call this once, when you are done.",
            parameters=schema,
        )
        self.response_format = ResponseFormat(name=_format_name(name), schema=schema)

    def parse_text(self, text: str) -> Any:
        """The typed value of a JSON answer; :class:`InvalidOutput` saying what is wrong."""
        try:
            data = json.loads(_strip_fences(text))
        except ValueError as exc:
            raise InvalidOutput(f"the answer is not valid JSON ({exc})") from None
        return self.parse(data)

    def parse(self, data: Any) -> Any:
        """The typed value of already-parsed JSON; :class:`InvalidOutput` saying what is wrong."""
        if not isinstance(data, dict):
            raise InvalidOutput(f"expected a JSON object, got {type(data).__name__}")
        try:
            validator_for(self.schema)(data)
        except Exception as exc:  # fastjsonschema's errors: describe which field and why
            raise InvalidOutput(describe_failure(exc, self.schema)) from None
        value = data["result"] if self.wrapped else data
        if self._convert is None:
            return value
        try:
            return self._convert(value)
        except Exception as exc:  # a validator of the type itself (e.g. pydantic) refused it
            raise InvalidOutput(f"{type(exc).__name__}: {exc}") from None


def _format_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64]
    return cleaned or "output"


def _strip_fences(text: str) -> str:
    """Models often wrap JSON in a Markdown code fence; take what is inside."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    return stripped
