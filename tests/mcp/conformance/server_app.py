"""The conformance suite's "everything server", written with daimon's public API only.

    python tests/mcp/conformance/server_app.py

Serves streamable HTTP on a free loopback port, prints its endpoint URL as the first line of
stdout once it accepts requests, and stops when its stdin closes (so it never outlives the test
that started it). The server scenarios of ``@modelcontextprotocol/conformance`` call tools,
resources and prompts by fixed names (``test_simple_text``, ``test://static-text``, ...); each
is written here the way a daimon user would write it today (logging, progress, sampling and
elicitation through the tool's ``RunContext``). Where daimon has no way to express what a
scenario asks for, the tool does the nearest thing daimon can and the scenario fails:
``baseline.yml`` lists those scenarios and what daimon lacks for each, so this file and the
baseline change together as daimon's MCP server grows.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import Mapping
from typing import Any

from daimon import ToolOutput, tool
from daimon.mcp import (
    MCPAudio,
    MCPContent,
    MCPEmbeddedResource,
    MCPImage,
    MCPServer,
    mcp_http_app,
    prompt,
    resource,
)
from daimon.testing import serving
from daimon.tools import RunContext

RED_PIXEL_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5E"
    "rkJggg=="
)
SILENT_WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="


@tool
def test_simple_text() -> str:
    """Returns a fixed text."""
    return "This is a simple text response for testing."


@tool
def test_error_handling() -> str:
    """Always fails."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@tool
def test_image_content() -> MCPImage:
    """Returns a 1x1 red PNG."""
    return MCPImage(data=base64.b64decode(RED_PIXEL_PNG), mime_type="image/png")


@tool
def test_audio_content() -> MCPAudio:
    """Returns a tiny WAV file."""
    return MCPAudio(data=base64.b64decode(SILENT_WAV), mime_type="audio/wav")


@tool
def test_embedded_resource() -> MCPEmbeddedResource:
    """Returns a resource, embedded."""
    return MCPEmbeddedResource(
        uri="test://embedded-resource",
        mime_type="text/plain",
        text="This is an embedded resource content.",
    )


@tool
def test_multiple_content_types() -> list[str | MCPContent]:
    """Returns text, an image and a resource."""
    return [
        "Multiple content types test:",
        MCPImage(data=base64.b64decode(RED_PIXEL_PNG), mime_type="image/png"),
        MCPEmbeddedResource(
            uri="test://mixed-content-resource",
            mime_type="application/json",
            text='{"test":"data","value":123}',
        ),
    ]


@tool
async def test_tool_with_logging(ctx: RunContext[Any]) -> str:
    """Works in three steps, logging each."""
    await ctx.log("info", "Tool execution started")
    await asyncio.sleep(0.05)
    await ctx.log("info", "Tool processing data")
    await asyncio.sleep(0.05)
    await ctx.log("info", "Tool execution completed")
    return "Tool with logging executed successfully"


@tool
async def test_tool_with_progress(ctx: RunContext[Any]) -> str:
    """Works in three steps, reporting progress on each."""
    await ctx.report_progress(0, 100)
    await asyncio.sleep(0.05)
    await ctx.report_progress(50, 100)
    await asyncio.sleep(0.05)
    await ctx.report_progress(100, 100)
    return f"Progress test completed (call {ctx.call_id})"


@tool
async def test_sampling(prompt: str, ctx: RunContext[Any]) -> str:
    """Asks the client's model to answer ``prompt``."""
    answer = await ctx.sample(prompt, max_tokens=100)
    return f"LLM response: {answer}"


@tool
async def test_elicitation(message: str, ctx: RunContext[Any]) -> str:
    """Asks the client's user for a username and an email."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = await ctx.elicit(message, schema)
    return f"User response: action={answer.action}, content={dict(answer.content or {})}"


@tool
async def test_elicitation_sep1034_defaults(ctx: RunContext[Any]) -> str:
    """Asks the client's user, with default values."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verified", "default": True},
        },
    }
    answer = await ctx.elicit("Please review and update the form fields with defaults", schema)
    return f"Elicitation completed: action={answer.action}, content={dict(answer.content or {})}"


def _titled(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in pairs]


@tool
async def test_elicitation_sep1330_enums(ctx: RunContext[Any]) -> str:
    """Asks the client's user to pick from the five kinds of enum (SEP-1330)."""
    options = ["option1", "option2", "option3"]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {
                "type": "string",
                "oneOf": _titled(
                    ("value1", "First Option"),
                    ("value2", "Second Option"),
                    ("value3", "Third Option"),
                ),
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": _titled(
                        ("value1", "First Choice"),
                        ("value2", "Second Choice"),
                        ("value3", "Third Choice"),
                    )
                },
            },
        },
    }
    answer = await ctx.elicit("Please select options from the enum fields", schema)
    return f"Elicitation completed: action={answer.action}, content={dict(answer.content or {})}"


@tool
async def test_reconnection() -> str:
    """Answers after a pause (SEP-1699 wants the server to close the SSE stream meanwhile)."""
    await asyncio.sleep(0.1)
    return "Reconnection test completed successfully"


class JsonSchema2020Tool:
    """A tool with a hand-written JSON Schema 2020-12 (``$schema``, ``$defs``, ``$ref``).

    Any object with a name, a description, a ``parameters_schema`` and ``execute`` is a daimon
    tool (:class:`daimon.tools.Tool`), so a schema can be given as is.
    """

    name = "json_schema_2020_12_tool"
    description = "Tool with JSON Schema 2020-12 features"
    parameters_schema: Mapping[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            }
        },
        "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
        "additionalProperties": False,
    }

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        return ToolOutput.json(arguments)


TOOLS = [
    test_simple_text,
    test_error_handling,
    test_image_content,
    test_audio_content,
    test_embedded_resource,
    test_multiple_content_types,
    test_tool_with_logging,
    test_tool_with_progress,
    test_sampling,
    test_elicitation,
    test_elicitation_sep1034_defaults,
    test_elicitation_sep1330_enums,
    test_reconnection,
    JsonSchema2020Tool(),
]


@resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A fixed text resource."""
    return "This is the content of the static text resource."


@resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A fixed binary resource (a 1x1 PNG)."""
    return base64.b64decode(RED_PIXEL_PNG)


@resource("test://template/{id}/data", mime_type="application/json")
def template_data(id: str) -> str:
    """Data for any id."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@resource("test://watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """A resource clients may subscribe to (``server.notify_resource_updated`` tells them)."""
    return "Watched resource content"


@prompt
def test_simple_prompt() -> str:
    """A prompt without arguments."""
    return "This is a simple prompt for testing."


@prompt
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with required arguments.

    Args:
        arg1: First test argument
        arg2: Second test argument
    """
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@prompt
def test_prompt_with_embedded_resource(resourceUri: str) -> list[str | MCPContent]:
    """A prompt embedding a resource.

    Args:
        resourceUri: URI of the resource to embed
    """
    return [
        MCPEmbeddedResource(
            uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
        ),
        "Please process the embedded resource above.",
    ]


@prompt
def test_prompt_with_image() -> list[str | MCPContent]:
    """A prompt with an image."""
    return [
        MCPImage(data=base64.b64decode(RED_PIXEL_PNG), mime_type="image/png"),
        "Please analyze the image above.",
    ]


RESOURCES = [static_text, static_binary, template_data, watched_resource]
PROMPTS = [
    test_simple_prompt,
    test_prompt_with_arguments,
    test_prompt_with_embedded_resource,
    test_prompt_with_image,
]
# Completions: prompt arguments and template placeholders annotated Literal[...] are completed;
# the suite completes test_prompt_with_arguments's free-text arg1 (no values).


server = MCPServer(TOOLS, name="everything", resources=RESOURCES, prompts=PROMPTS)


async def main() -> None:
    """Serve until stdin closes."""
    app = lambda port: mcp_http_app(server, port=port)  # noqa: E731
    async with serving(app_for_port=app) as base:
        print(f"{base}/mcp", flush=True)
        await asyncio.to_thread(sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main())
