"""Translating between MCP's wire types and daimon's: tool results, tools, resources, prompts."""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import base64
import binascii
import inspect
import json
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types

from daimon.core.messages import AudioPart, ImagePart, Message
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.mcp._content import (
    MCPAudio,
    MCPEmbeddedResource,
    MCPImage,
    MCPResourceLink,
    content_blocks,
)

__all__ = (
    "MCPPrompt",
    "MCPPromptArgument",
    "MCPResource",
    "MCPResourceContents",
    "MCPResourceTemplate",
    "MCPRoot",
    "OutputSchema",
    "call_tool_result",
    "input_schema",
    "mcp_tool",
    "model_tool_name",
    "output_schema",
    "prompt_from_wire",
    "prompt_messages",
    "resource_contents",
    "resource_from_wire",
    "template_from_wire",
    "tool_output",
)

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # the strictest provider limit (OpenAI function names)


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPResource:
    """A resource an MCP server offers."""

    uri: str
    name: str
    description: str | None = None
    mime_type: str | None = None
    kind: Literal["mcp_resource"] = field(default="mcp_resource", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPResourceTemplate:
    """A family of resources an MCP server offers: a URI template (RFC 6570) to fill in."""

    uri_template: str
    name: str
    description: str | None = None
    mime_type: str | None = None
    kind: Literal["mcp_resource_template"] = field(
        default="mcp_resource_template", init=False, repr=False
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPRoot:
    """A directory or file the client lets servers work on (``roots/list``): a ``file://`` URI."""

    uri: str
    name: str | None = None
    kind: Literal["mcp_root"] = field(default="mcp_root", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPResourceContents:
    """What reading a resource gave: text, or bytes for binary resources."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    data: bytes | None = None
    kind: Literal["mcp_resource_contents"] = field(
        default="mcp_resource_contents", init=False, repr=False
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPPromptArgument:
    """One argument of a server prompt template."""

    name: str
    description: str | None = None
    required: bool = False
    kind: Literal["mcp_prompt_argument"] = field(
        default="mcp_prompt_argument", init=False, repr=False
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPPrompt:
    """A prompt template an MCP server offers."""

    name: str
    description: str | None = None
    arguments: tuple[MCPPromptArgument, ...] = ()
    kind: Literal["mcp_prompt"] = field(default="mcp_prompt", init=False, repr=False)


# ------------------------------------------------------------------------------ client side


def model_tool_name(remote: str, prefix: str = "") -> str:
    """The name a model can call: ``prefix + remote`` with characters providers refuse replaced."""
    name = _NAME_CHARS.sub("_", prefix + remote)
    return name[:_MAX_NAME] or "_"


def input_schema(tool: mcp_types.Tool) -> dict[str, Any]:
    """The tool's arguments schema, always an object schema.

    ``$schema`` is dropped: the server validates against its own dialect, and daimon's validator
    only needs the constraints.
    """
    schema = {k: v for k, v in tool.input_schema.items() if k != "$schema"}
    schema.setdefault("type", "object")
    return schema


def tool_output(result: mcp_types.CallToolResult, *, max_chars: int) -> ToolOutput:
    """What the model reads of a tool result: its text, with non-text parts described.

    Its images and audio also ride along as media, which the model sees where its provider allows.
    """
    pieces = [_describe(block) for block in result.content]
    text = "\n".join(p for p in pieces if p)
    data = result.structured_content
    if not text and data is not None:
        text = json.dumps(data, ensure_ascii=False, default=str)
    if result.is_error and not text:
        text = "Error: the tool failed without saying why"
    if len(text) > max_chars:
        text = f"{text[:max_chars]}... (truncated {len(text) - max_chars} characters)"
    media = tuple(part for part in map(_media, result.content) if part is not None)
    return ToolOutput(content=text, data=data, is_error=result.is_error, media=media)


def _media(block: mcp_types.ContentBlock) -> ImagePart | AudioPart | None:
    """An image or audio block as a part the model can see (beside its description)."""
    if not isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        return None
    data = _decode(block.data)
    if not data:
        return None
    if isinstance(block, mcp_types.ImageContent):
        return ImagePart(data=data, media_type=block.mime_type)
    return AudioPart(data=data, media_type=block.mime_type)


def _describe(block: mcp_types.ContentBlock) -> str:
    match block:
        case mcp_types.TextContent():
            return block.text
        case mcp_types.ImageContent() | mcp_types.AudioContent():
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            return f"[{kind}: {block.mime_type}, {_decoded_size(block.data)} bytes]"
        case mcp_types.EmbeddedResource():
            inner = block.resource
            if isinstance(inner, mcp_types.TextResourceContents):
                return inner.text
            mime = inner.mime_type or "application/octet-stream"
            return f"[resource {inner.uri}: {mime}, {_decoded_size(inner.blob)} bytes]"
        case mcp_types.ResourceLink():
            return f"[resource link: {block.uri}" + (f" ({block.name})]" if block.name else "]")


def _decoded_size(b64: str) -> int:
    return len(b64) * 3 // 4 - b64[-2:].count("=")


def _decode(b64: str) -> bytes:
    try:
        return base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return b""


def resource_from_wire(resource: mcp_types.Resource) -> MCPResource:
    """A listed resource."""
    return MCPResource(
        uri=resource.uri,
        name=resource.name,
        description=resource.description,
        mime_type=resource.mime_type,
    )


def template_from_wire(template: mcp_types.ResourceTemplate) -> MCPResourceTemplate:
    """A listed resource template."""
    return MCPResourceTemplate(
        uri_template=template.uri_template,
        name=template.name,
        description=template.description,
        mime_type=template.mime_type,
    )


def resource_contents(result: mcp_types.ReadResourceResult) -> list[MCPResourceContents]:
    """The contents of a read resource, binary parts decoded."""
    contents: list[MCPResourceContents] = []
    for item in result.contents:
        if isinstance(item, mcp_types.TextResourceContents):
            contents.append(
                MCPResourceContents(uri=item.uri, mime_type=item.mime_type, text=item.text)
            )
        else:
            contents.append(
                MCPResourceContents(uri=item.uri, mime_type=item.mime_type, data=_decode(item.blob))
            )
    return contents


def prompt_from_wire(prompt: mcp_types.Prompt) -> MCPPrompt:
    """A listed prompt template."""
    return MCPPrompt(
        name=prompt.name,
        description=prompt.description,
        arguments=tuple(
            MCPPromptArgument(name=a.name, description=a.description, required=bool(a.required))
            for a in prompt.arguments or ()
        ),
    )


def prompt_messages(result: mcp_types.GetPromptResult) -> list[Message]:
    """A rendered prompt as daimon messages (user images kept, other non-text parts described)."""
    messages: list[Message] = []
    for item in result.messages:
        block = item.content
        if item.role == "user" and isinstance(block, mcp_types.ImageContent):
            image = ImagePart(data=_decode(block.data), media_type=block.mime_type)
            messages.append(Message.user([image]))
        elif item.role == "user":
            messages.append(Message.user(_describe(block)))
        else:
            messages.append(Message.assistant(_describe(block)))
    return messages


# ------------------------------------------------------------------------------ server side


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """What a tool's return annotation promises, as MCP's ``outputSchema``.

    MCP wants an object schema; any other (``int``, a list) is wrapped as ``{"result": ...}``,
    and so is the structured content sent with each result.
    """

    schema: dict[str, Any]
    wrapped: bool

    def structured(self, data: Any) -> dict[str, Any]:
        """The structured content for a result's JSON ``data``."""
        return {"result": data} if self.wrapped else data


_NOT_STRUCTURED = {"str", "None", "NoneType", "ToolOutput", "Any"}


def output_schema(tool: object) -> OutputSchema | None:
    """The output schema of a function tool with a JSON return annotation, else ``None``.

    Text (``str``), ``None``, ``ToolOutput``, ``Any`` and :mod:`daimon.mcp` content results
    have none.
    """
    function = getattr(tool, "function", None)
    if not callable(function):
        return None
    try:
        annotation = inspect.signature(function, eval_str=True).return_annotation
    except (NameError, TypeError, ValueError):  # an annotation that does not resolve here
        return None
    if annotation is inspect.Signature.empty or not _structured(annotation):
        return None
    from pydantic import PydanticUserError, TypeAdapter

    try:
        schema = TypeAdapter(annotation).json_schema(mode="serialization")
    except (PydanticUserError, TypeError, ValueError):  # no JSON Schema for it
        return None
    if schema.get("type") == "object":
        return OutputSchema(schema, wrapped=False)
    defs = schema.pop("$defs", None)
    wrapped = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
    return OutputSchema({**wrapped, "$defs": defs} if defs else wrapped, wrapped=True)


def _structured(annotation: Any) -> bool:
    """Whether a result of this type is JSON data: not text, nothing, any or MCP content."""
    members = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    if any(_name(member) in _NOT_STRUCTURED for member in members):
        return False
    return not _mentions_mcp_content(annotation)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _name(annotation: Any) -> str:
    return str(getattr(annotation, "__name__", annotation))


def _mentions_mcp_content(annotation: Any) -> bool:
    if annotation in (MCPImage, MCPAudio, MCPEmbeddedResource, MCPResourceLink):
        return True
    return any(_mentions_mcp_content(inner) for inner in typing.get_args(annotation))


def mcp_tool(spec: ToolSpec, output: OutputSchema | None = None) -> mcp_types.Tool:
    """A daimon tool as MCP lists it."""
    schema = dict(spec.parameters)
    schema.setdefault("type", "object")
    return mcp_types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=schema,
        output_schema=output.schema if output else None,
    )


def call_tool_result(
    output: ToolOutput, schema: OutputSchema | None = None
) -> mcp_types.CallToolResult:
    """A daimon tool result as MCP sends it; object data also goes out as structured content.

    A result of :mod:`daimon.mcp` content (an image, audio, resources, or a list of them and
    text) goes out as those content blocks, without structured content. A tool with an
    output ``schema`` sends its data as the structured content that schema describes.
    """
    blocks = None if output.is_error else content_blocks(output.data)
    if blocks is not None:
        return mcp_types.CallToolResult(content=blocks)
    if schema is not None and not output.is_error:
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(text=output.content)],
            structured_content=schema.structured(output.data),
        )
    structured = output.data if isinstance(output.data, Mapping) else None
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=output.content)],
        structured_content=structured,
        is_error=output.is_error,
    )
