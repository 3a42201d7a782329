"""Rich MCP content a served tool, prompt or resource returns: images, audio, resources, links.

A tool function returns one of these (or a list mixing them with text) and the MCP server
sends it as content blocks. They are pydantic models, so a tool's result holds them as JSON
(bytes in base64, a ``kind`` naming the type), the way every daimon tool result is JSON: an
agent calling the same tool in-process reads that JSON, an MCP client gets the blocks.
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import base64
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import mcp_types
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from daimon.core.messages import ImagePart

__all__ = (
    "MCPAudio",
    "MCPContent",
    "MCPEmbeddedResource",
    "MCPImage",
    "MCPResourceLink",
    "content_block",
    "content_blocks",
)

_CONFIG = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")


class MCPImage(BaseModel):
    """An image: its bytes and MIME type."""

    model_config = _CONFIG
    data: bytes
    mime_type: str = "image/png"
    kind: Literal["mcp_image"] = "mcp_image"


class MCPAudio(BaseModel):
    """A piece of audio: its bytes and MIME type."""

    model_config = _CONFIG
    data: bytes
    mime_type: str = "audio/wav"
    kind: Literal["mcp_audio"] = "mcp_audio"


class MCPEmbeddedResource(BaseModel):
    """A resource's contents sent inline: ``text``, or ``data`` for a binary resource."""

    model_config = _CONFIG
    uri: str
    mime_type: str | None = None
    text: str | None = None
    data: bytes | None = None
    kind: Literal["mcp_embedded_resource"] = "mcp_embedded_resource"

    @model_validator(mode="after")
    def _one_of(self) -> MCPEmbeddedResource:
        if (self.text is None) == (self.data is None):
            raise ValueError("an embedded resource needs exactly one of text or data")
        return self


class MCPResourceLink(BaseModel):
    """A link to a resource the client may read (``resources/read``)."""

    model_config = _CONFIG
    uri: str
    name: str
    description: str | None = None
    mime_type: str | None = None
    kind: Literal["mcp_resource_link"] = "mcp_resource_link"


MCPContent: TypeAlias = MCPImage | MCPAudio | MCPEmbeddedResource | MCPResourceLink
_KINDS: dict[str, type[MCPContent]] = {
    "mcp_image": MCPImage,
    "mcp_audio": MCPAudio,
    "mcp_embedded_resource": MCPEmbeddedResource,
    "mcp_resource_link": MCPResourceLink,
}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def content_block(item: str | MCPContent | ImagePart) -> mcp_types.ContentBlock:
    """One piece of content as an MCP content block."""
    match item:
        case str():
            return mcp_types.TextContent(text=item)
        case MCPImage():
            return mcp_types.ImageContent(data=_b64(item.data), mime_type=item.mime_type)
        case MCPAudio():
            return mcp_types.AudioContent(data=_b64(item.data), mime_type=item.mime_type)
        case MCPEmbeddedResource():
            return mcp_types.EmbeddedResource(resource=_resource_contents(item))
        case MCPResourceLink():
            return mcp_types.ResourceLink(
                uri=item.uri,
                name=item.name,
                description=item.description,
                mime_type=item.mime_type,
            )
        case ImagePart(data=bytes() as data):
            return mcp_types.ImageContent(data=_b64(data), mime_type=item.media_type)
        case ImagePart():
            return mcp_types.ResourceLink(
                uri=str(item.url), name="image", mime_type=item.media_type
            )
    raise TypeError(f"not MCP content: {type(item).__name__}")


def _resource_contents(
    item: MCPEmbeddedResource,
) -> mcp_types.TextResourceContents | mcp_types.BlobResourceContents:
    if item.text is not None:
        return mcp_types.TextResourceContents(
            uri=item.uri, mime_type=item.mime_type, text=item.text
        )
    return mcp_types.BlobResourceContents(
        uri=item.uri, mime_type=item.mime_type, blob=_b64(item.data or b"")
    )


def content_blocks(data: Any) -> list[mcp_types.ContentBlock] | None:
    """The content blocks a tool's JSON result stands for, or ``None`` if it is plain data.

    A result is rich content when it is one :data:`MCPContent` (as JSON: a mapping whose
    ``kind`` names one) or a non-empty list of those and strings with at least one of them.
    """
    items = data if isinstance(data, list) else [data]
    if not items or not any(_kind(item) is not None for item in items):
        return None
    blocks: list[mcp_types.ContentBlock] = []
    for item in items:
        model = _kind(item)
        if model is None and not isinstance(item, str):
            return None
        try:
            blocks.append(content_block(item if model is None else model.model_validate(item)))
        except ValidationError:
            return None
    return blocks


def _kind(item: Any) -> type[MCPContent] | None:
    if isinstance(item, Mapping):
        kind = item.get("kind")
        if isinstance(kind, str):
            return _KINDS.get(kind)
    return None
