"""Rich tool results (images, audio, resources, links, mixed) served as MCP content blocks."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError

from daimon import Agent, ChatRequest, ChatResponse, ToolOutput, tool
from daimon.mcp import (
    MCPAudio,
    MCPClient,
    MCPContent,
    MCPEmbeddedResource,
    MCPImage,
    MCPResourceLink,
    mcp_http_app,
)
from daimon.mcp._content import content_blocks
from daimon.mcp._convert import output_schema
from daimon.models import FunctionModel
from mcp import Client

from .conftest import serving

PNG = b"\x89PNG\r\n\x1a\n\x00\x01"
WAV = b"RIFF\x00\x00WAVE"


@tool
def picture() -> MCPImage:
    """A picture."""
    return MCPImage(data=PNG)


@tool
def sound() -> MCPAudio:
    """A sound."""
    return MCPAudio(data=WAV, mime_type="audio/x-wav")


@tool
def report() -> list[str | MCPContent]:
    """Text, an image, a binary resource and a link."""
    return [
        "Here it is:",
        MCPImage(data=PNG, mime_type="image/webp"),
        MCPEmbeddedResource(uri="file:///r.bin", mime_type="application/octet-stream", data=WAV),
        MCPResourceLink(uri="file:///big.csv", name="big.csv", mime_type="text/csv"),
    ]


@tool
def lookalike() -> dict[str, Any]:
    """Plain data that only looks like an image."""
    return {"kind": "mcp_image", "data": "not base64!", "extra": 1}


@tool
def failed() -> ToolOutput:
    """An error result."""
    return ToolOutput.error("Error: no picture")


def _agent() -> Agent:
    return Agent(
        FunctionModel(lambda request: ChatResponse.reply("-")),
        name="pictures",
        tools=[picture, sound, report, lookalike, failed],
    )


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_rich_results_are_content_blocks_for_the_sdk_client(protocol: str) -> None:
    app = mcp_http_app(_agent(), expose_agent=False)
    async with serving(app) as base, Client(f"{base}/mcp", mode=protocol) as client:
        (image,) = (await client.call_tool("picture", {})).content
        assert (image.type, image.mime_type, base64.b64decode(image.data)) == (
            "image",
            "image/png",
            PNG,
        )
        (audio,) = (await client.call_tool("sound", {})).content
        assert (audio.type, audio.mime_type, base64.b64decode(audio.data)) == (
            "audio",
            "audio/x-wav",
            WAV,
        )
        mixed = await client.call_tool("report", {})
        assert not mixed.is_error and mixed.structured_content is None
        text, webp, embedded, link = mixed.content
        assert (text.type, text.text) == ("text", "Here it is:")
        assert webp.mime_type == "image/webp"
        assert embedded.type == "resource" and base64.b64decode(embedded.resource.blob) == WAV
        assert (link.type, link.uri, link.name, link.mime_type) == (
            "resource_link",
            "file:///big.csv",
            "big.csv",
            "text/csv",
        )
        plain = await client.call_tool("lookalike", {})  # invalid content stays plain JSON data
        assert [b.type for b in plain.content] == ["text"]
        assert plain.structured_content == {"kind": "mcp_image", "data": "not base64!", "extra": 1}
        error = await client.call_tool("failed", {})
        assert error.is_error and error.content[0].text == "Error: no picture"


async def test_daimons_own_client_reads_the_blocks_as_descriptions() -> None:
    app = mcp_http_app(_agent(), expose_agent=False)
    async with serving(app) as base, MCPClient.http(f"{base}/mcp") as client:
        by_name = {t.name: t for t in await client.tools()}
        output = await by_name["report"].execute({}, _context())
        assert output.content.splitlines() == [
            "Here it is:",
            "[image: image/webp, 10 bytes]",
            "[resource file:///r.bin: application/octet-stream, 10 bytes]",
            "[resource link: file:///big.csv (big.csv)]",
        ]


def _context() -> Any:
    from daimon.tools import RunContext

    return RunContext(run_id="r", deps=None, call_id="c", tool_name="report")


async def test_in_process_the_agent_reads_the_content_as_json() -> None:
    seen: list[str] = []

    def model(request: ChatRequest) -> ChatResponse:
        if len(request.messages) == 1:
            from daimon import ToolCall

            return ChatResponse.tool_use(ToolCall(id="1", name="picture", arguments={}))
        seen.append(request.messages[-1].text)
        return ChatResponse.reply("ok")

    agent = Agent(FunctionModel(model), tools=[picture])
    await agent.prompt("show me")
    (text,) = seen
    assert json.loads(text) == {
        "data": "iVBORw0KGgoAAQ==",
        "mime_type": "image/png",
        "kind": "mcp_image",
    }


def test_content_blocks_only_for_valid_content() -> None:
    assert content_blocks(None) is None
    assert content_blocks([]) is None
    assert content_blocks(["just", "text"]) is None
    assert content_blocks({"kind": "mcp_image"}) is None  # no data: not an image
    assert content_blocks(["a", {"kind": "mcp_audio", "data": "AAE="}, 3]) is None
    blocks = content_blocks(["a", {"kind": "mcp_audio", "data": "AAE="}])
    assert blocks is not None and [b.type for b in blocks] == ["text", "audio"]


def test_an_embedded_resource_has_text_or_data() -> None:
    with pytest.raises(ValidationError, match="exactly one of text or data"):
        MCPEmbeddedResource(uri="x://y")
    with pytest.raises(ValidationError, match="exactly one of text or data"):
        MCPEmbeddedResource(uri="x://y", text="a", data=b"b")


# ------------------------------------------------------------------------------ output schemas


@dataclass
class City:
    name: str
    population: int


@tool
def count(text: str) -> int:
    """Count the words."""
    return len(text.split())


@tool
def city(name: str) -> City:
    """A city."""
    return City(name=name, population=3)


@tool
def words(text: str) -> list[str]:
    """The words."""
    return text.split()


@tool
def loose(key: str) -> dict[str, Any]:
    """A mapping."""
    return {key: 1}


@tool
def echo(text: str) -> str:
    """Text: no output schema."""
    return text


@tool
def maybe(text: str) -> str | None:
    """Text or nothing: no output schema."""
    return text or None


@tool
def fails_typed() -> int:
    """Typed, and raises."""
    raise RuntimeError("no number")


def test_output_schemas_follow_the_return_annotation() -> None:
    counted = output_schema(count)
    assert counted is not None and counted.wrapped
    assert counted.schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
    }
    assert counted.structured(3) == {"result": 3}
    typed = output_schema(city)
    assert (
        typed is not None
        and not typed.wrapped
        and typed.schema["required"] == ["name", "population"]
    )
    assert output_schema(loose) is not None and not output_schema(loose).wrapped  # type: ignore[union-attr]
    for untyped in (echo, maybe, picture, report, failed):
        assert output_schema(untyped) is None, untyped.name


async def test_typed_results_carry_structured_content_the_sdk_client_validates() -> None:
    agent = Agent(
        FunctionModel(lambda request: ChatResponse.reply("-")),
        tools=[count, city, words, loose, echo, fails_typed],
    )
    app = mcp_http_app(agent, expose_agent=False)
    async with serving(app) as base, Client(f"{base}/mcp", mode="legacy") as client:
        listed = {t.name: t.output_schema for t in (await client.list_tools()).tools}
        assert listed["count"]["properties"]["result"] == {"type": "integer"}
        assert listed["city"]["properties"]["population"]["type"] == "integer"
        assert listed["echo"] is None
        counted = await client.call_tool("count", {"text": "one two three"})
        assert (counted.structured_content, counted.content[0].text) == ({"result": 3}, "3")
        typed = await client.call_tool("city", {"name": "Oslo"})
        assert typed.structured_content == {"name": "Oslo", "population": 3}
        listed_words = await client.call_tool("words", {"text": "a b"})
        assert listed_words.structured_content == {"result": ["a", "b"]}
        assert (await client.call_tool("loose", {"key": "k"})).structured_content == {"k": 1}
        failed_call = await client.call_tool("fails_typed", {})
        assert failed_call.is_error and failed_call.structured_content is None
        assert "RuntimeError: no number" in failed_call.content[0].text
