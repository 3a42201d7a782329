"""MCP wire types to daimon types and back."""

from __future__ import annotations

import base64

import mcp_types

from daimon.core.messages import AudioPart, ImagePart, Role
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.mcp._convert import (
    call_tool_result,
    input_schema,
    mcp_tool,
    model_tool_name,
    prompt_messages,
    resource_contents,
    tool_output,
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_text_parts_are_joined_and_non_text_parts_described() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="first"),
            mcp_types.ImageContent(data=_b64(b"12345"), mime_type="image/png"),
            mcp_types.AudioContent(data=_b64(b"1"), mime_type="audio/wav"),
            mcp_types.EmbeddedResource(
                resource=mcp_types.TextResourceContents(uri="mem://a", text="embedded text")
            ),
            mcp_types.EmbeddedResource(
                resource=mcp_types.BlobResourceContents(uri="mem://b", blob=_b64(b"xy"))
            ),
            mcp_types.ResourceLink(uri="file:///x", name="x"),
        ]
    )
    output = tool_output(result, max_chars=10_000)
    assert output.content.splitlines() == [
        "first",
        "[image: image/png, 5 bytes]",
        "[audio: audio/wav, 1 bytes]",
        "embedded text",
        "[resource mem://b: application/octet-stream, 2 bytes]",
        "[resource link: file:///x (x)]",
    ]
    assert not output.is_error
    # The image and the audio also go to the model as media, where its provider takes them.
    assert output.media == (
        ImagePart(data=b"12345", media_type="image/png"),
        AudioPart(data=b"1", media_type="audio/wav"),
    )


def test_structured_content_is_data_and_text_when_there_is_no_text() -> None:
    result = mcp_types.CallToolResult(content=[], structured_content={"n": 3})
    assert tool_output(result, max_chars=100) == ToolOutput(content='{"n": 3}', data={"n": 3})


def test_is_error_is_kept_and_never_empty() -> None:
    flagged = tool_output(mcp_types.CallToolResult(content=[], is_error=True), max_chars=100)
    assert flagged.is_error and flagged.content.startswith("Error:")


def test_huge_results_are_cut() -> None:
    result = mcp_types.CallToolResult(content=[mcp_types.TextContent(text="x" * 1000)])
    output = tool_output(result, max_chars=100)
    assert output.content == "x" * 100 + "... (truncated 900 characters)"


def test_names_are_made_safe_for_model_providers() -> None:
    assert model_tool_name("get.weather") == "get_weather"
    assert model_tool_name("search", "docs_") == "docs_search"
    assert len(model_tool_name("a" * 200)) == 64


def test_input_schema_is_an_object_schema_without_dialect() -> None:
    tool = mcp_types.Tool(
        name="t",
        input_schema={"$schema": "https://json-schema.org/draft/2020-12/schema", "properties": {}},
    )
    assert input_schema(tool) == {"properties": {}, "type": "object"}


def test_resources_decode_binary_contents() -> None:
    result = mcp_types.ReadResourceResult(
        contents=[
            mcp_types.TextResourceContents(uri="mem://t", text="hi", mime_type="text/plain"),
            mcp_types.BlobResourceContents(uri="mem://b", blob=_b64(b"\x00\x01")),
        ]
    )
    text, blob = resource_contents(result)
    assert (text.text, text.data, text.mime_type) == ("hi", None, "text/plain")
    assert (blob.text, blob.data) == (None, b"\x00\x01")


def test_prompts_become_messages() -> None:
    result = mcp_types.GetPromptResult(
        messages=[
            mcp_types.PromptMessage(role="user", content=mcp_types.TextContent(text="hello")),
            mcp_types.PromptMessage(
                role="user",
                content=mcp_types.ImageContent(data=_b64(b"png"), mime_type="image/png"),
            ),
            mcp_types.PromptMessage(role="assistant", content=mcp_types.TextContent(text="hi")),
        ]
    )
    user, image, assistant = prompt_messages(result)
    assert (user.role, user.text) == (Role.USER, "hello")
    assert isinstance(image.content, tuple) and image.content == (
        ImagePart(data=b"png", media_type="image/png"),
    )
    assert (assistant.role, assistant.text) == (Role.ASSISTANT, "hi")


def test_daimon_tools_and_results_go_out_as_mcp_types() -> None:
    spec = ToolSpec(name="add", description="Add.", parameters={"properties": {}})
    tool = mcp_tool(spec)
    assert (tool.name, tool.description, tool.input_schema["type"]) == ("add", "Add.", "object")
    result = call_tool_result(ToolOutput(content="boom", is_error=True))
    assert result.is_error and result.content == [mcp_types.TextContent(text="boom")]
    assert call_tool_result(ToolOutput.json({"a": 1})).structured_content == {"a": 1}
    assert call_tool_result(ToolOutput.json([1])).structured_content is None
