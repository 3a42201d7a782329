"""Resources and prompts declared with daimon's decorators, read through the official SDK client."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any, Literal

import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from daimon import Message
from daimon.core.errors import BuilderError
from daimon.core.messages import ImagePart
from daimon.mcp import (
    MCPEmbeddedResource,
    MCPImage,
    MCPResourceLink,
    MCPServer,
    Prompt,
    Resource,
    mcp_http_app,
    prompt,
    resource,
)
from mcp import Client

from .conftest import Probe, make_agent, serving

PNG = b"\x89PNG\r\n\x1a\n-not-really"
CONFORMANCE = Path(__file__).resolve().parent / "conformance"


@resource("docs://readme", mime_type="text/markdown")
def readme() -> str:
    """The project's readme."""
    return "# Hello"


@resource("docs://logo", mime_type="image/png")
async def logo() -> bytes:
    """The logo."""
    return PNG


@resource("users://{user_id}/profile/{field}", mime_type="application/json")
def profile(user_id: str, field: Literal["name", "email", "nickname"]) -> str:
    """One field of a user's profile."""
    return json.dumps({"user": user_id, "field": field})


@resource("docs://broken")
def broken() -> str:
    """Always fails."""
    raise OSError("disk on fire")


@resource("docs://wrong-type")
def wrong_type() -> Any:
    """Returns neither text nor bytes."""
    return 42


@prompt
def review(code: str, language: Literal["python", "rust", "go"] = "python") -> str:
    """Review a piece of code.

    Args:
        code: The code to review.
        language: Its language.
    """
    return f"Review this {language} code:\n{code}"


@prompt(name="describe", description="Describe a picture.")
async def describe_picture() -> list[Any]:
    return [
        MCPImage(data=PNG),
        MCPEmbeddedResource(uri="docs://readme", mime_type="text/markdown", text="# Hello"),
        MCPResourceLink(uri="docs://logo", name="logo"),
        Message.assistant("I see a logo."),
        Message.user([ImagePart(data=PNG, media_type="image/png")]),
        "What else?",
    ]


@prompt
def failing() -> str:
    """Always fails."""
    raise ValueError("no prompt today")


def _server() -> MCPServer:
    return MCPServer(
        make_agent(Probe()),
        resources=[readme, logo, profile, broken, wrong_type],
        prompts=[review, describe_picture, failing],
        instructions="Docs and reviews.",
    )


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_resources_are_listed_and_read(protocol: str) -> None:
    app = mcp_http_app(_server(), expose_agent=False)
    async with serving(app) as base, Client(f"{base}/mcp", mode=protocol) as client:
        listed = {r.uri: r for r in (await client.list_resources()).resources}
        assert sorted(listed) == [
            "docs://broken",
            "docs://logo",
            "docs://readme",
            "docs://wrong-type",
        ]
        assert (listed["docs://readme"].name, listed["docs://readme"].description) == (
            "readme",
            "The project's readme.",
        )
        (template,) = (await client.list_resource_templates()).resource_templates
        assert (template.uri_template, template.mime_type) == (
            "users://{user_id}/profile/{field}",
            "application/json",
        )

        (text,) = (await client.read_resource("docs://readme")).contents
        assert (text.uri, text.mime_type, text.text) == (
            "docs://readme",
            "text/markdown",
            "# Hello",
        )
        (blob,) = (await client.read_resource("docs://logo")).contents
        assert (blob.mime_type, base64.b64decode(blob.blob)) == ("image/png", PNG)
        (filled,) = (await client.read_resource("users://42/profile/email")).contents
        assert filled.uri == "users://42/profile/email"
        assert json.loads(filled.text) == {"user": "42", "field": "email"}


async def test_bad_resource_reads_are_json_rpc_errors_and_the_server_keeps_serving() -> None:
    app = mcp_http_app(_server(), expose_agent=False)
    async with serving(app) as base, Client(f"{base}/mcp", mode="legacy") as client:
        with pytest.raises(MCPError, match="Resource not found: docs://nothing") as unknown:
            await client.read_resource("docs://nothing")
        assert unknown.value.code == -32602
        with pytest.raises(MCPError, match="Resource not found"):  # a template needs each part
            await client.read_resource("users://42/profile")
        with pytest.raises(MCPError, match="Resource not found"):  # not one of the Literal's
            await client.read_resource("users://42/profile/password")
        with pytest.raises(MCPError, match="reading docs://broken failed: OSError: disk on fire"):
            await client.read_resource("docs://broken")
        with pytest.raises(MCPError, match="returned a int, not str or bytes"):
            await client.read_resource("docs://wrong-type")
        (text,) = (await client.read_resource("docs://readme")).contents
        assert text.text == "# Hello"


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_prompts_are_listed_and_rendered(protocol: str) -> None:
    app = mcp_http_app(_server(), expose_agent=False)
    async with serving(app) as base, Client(f"{base}/mcp", mode=protocol) as client:
        assert client.instructions == "Docs and reviews."
        listed = {p.name: p for p in (await client.list_prompts()).prompts}
        assert sorted(listed) == ["describe", "failing", "review"]
        assert listed["review"].description == "Review a piece of code."
        arguments = [(a.name, a.description, a.required) for a in listed["review"].arguments or ()]
        assert arguments == [
            ("code", "The code to review.", True),
            ("language", "Its language.", False),
        ]
        assert listed["describe"].description == "Describe a picture."

        got = await client.get_prompt("review", {"code": "x = 1"})
        (message,) = got.messages
        assert (message.role, message.content.text) == ("user", "Review this python code:\nx = 1")
        got = await client.get_prompt("review", {"code": "fn main() {}", "language": "rust"})
        assert "rust code" in got.messages[0].content.text

        rich = (await client.get_prompt("describe")).messages
        kinds = [(m.role, m.content.type) for m in rich]
        assert kinds == [
            ("user", "image"),
            ("user", "resource"),
            ("user", "resource_link"),
            ("assistant", "text"),
            ("user", "image"),
            ("user", "text"),
        ]
        assert (
            base64.b64decode(rich[0].content.data) == PNG
            and rich[0].content.mime_type == "image/png"
        )
        assert rich[1].content.resource.text == "# Hello"
        assert rich[2].content.uri == "docs://logo"


async def test_bad_prompt_requests_are_json_rpc_errors() -> None:
    app = mcp_http_app(_server(), expose_agent=False)
    async with serving(app) as base, Client(f"{base}/mcp", mode="legacy") as client:
        with pytest.raises(
            MCPError, match="prompt 'review' needs the argument\\(s\\) code"
        ) as missing:
            await client.get_prompt("review", {"language": "go"})
        assert missing.value.code == -32602
        with pytest.raises(
            MCPError, match="has no argument\\(s\\) colour; it takes code, language"
        ):
            await client.get_prompt("review", {"code": "x", "colour": "red"})
        with pytest.raises(MCPError, match="language must be one of python, rust, go, not 'cobol'"):
            await client.get_prompt("review", {"code": "x", "language": "cobol"})
        with pytest.raises(MCPError, match="Unknown prompt 'nothing'; the prompts: describe"):
            await client.get_prompt("nothing")
        with pytest.raises(MCPError, match="prompt 'failing' failed: ValueError: no prompt today"):
            await client.get_prompt("failing")
        assert (await client.get_prompt("review", {"code": "y"})).messages


# resources/subscribe is the handshake era's (2025-11-25); 2026-07-28 has subscriptions/listen
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_subscribed_clients_are_told_of_updates_until_they_unsubscribe() -> None:
    server = _server()
    updated: list[str] = []
    arrived = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updated.append(message.params.uri)
            arrived.set()

    app = mcp_http_app(server, expose_agent=False)
    async with serving(app) as base:
        await _subscribe_and_be_told(server, base, on_message, arrived)
        assert updated == ["docs://readme"]
        # the client has gone without unsubscribing its template instance: the subscription
        # went with its connection
        for _ in range(100):
            if not server._subscribers:
                break
            await asyncio.sleep(0.05)
        assert server._subscribers == {}
        assert await server.notify_resource_updated("users://1/profile/name") == 0


async def _subscribe_and_be_told(
    server: MCPServer, base: str, on_message: Any, arrived: asyncio.Event
) -> None:
    async with Client(f"{base}/mcp", mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities.resources.subscribe
        assert await server.notify_resource_updated("docs://readme") == 0  # nobody subscribed
        await client.subscribe_resource("docs://readme")
        await client.subscribe_resource("users://1/profile/name")  # an instance of a template
        with pytest.raises(MCPError, match="Resource not found: docs://nothing"):
            await client.subscribe_resource("docs://nothing")
        assert await server.notify_resource_updated("docs://readme") == 1
        await asyncio.wait_for(arrived.wait(), 10)
        await client.unsubscribe_resource("docs://readme")
        assert await server.notify_resource_updated("docs://readme") == 0
        assert await server.notify_resource_updated("users://1/profile/name") == 1
        assert list(server._subscribers) == ["users://1/profile/name"]


async def test_literal_arguments_and_placeholders_are_completed() -> None:
    app = mcp_http_app(_server(), expose_agent=False)
    async with serving(app) as base, Client(f"{base}/mcp", mode="legacy") as client:
        assert client.server_capabilities.completions is not None
        review_ref = mcp_types.PromptReference(name="review")
        got = await client.complete(review_ref, {"name": "language", "value": ""})
        assert got.completion.values == ["python", "rust", "go"]
        got = await client.complete(review_ref, {"name": "language", "value": "r"})
        assert (got.completion.values, got.completion.total) == (["rust"], 1)
        got = await client.complete(review_ref, {"name": "code", "value": "x"})
        assert got.completion.values == []  # a free-text argument has no completions
        template = mcp_types.ResourceTemplateReference(uri="users://{user_id}/profile/{field}")
        got = await client.complete(template, {"name": "field", "value": "n"})
        assert got.completion.values == ["name", "nickname"]
        with pytest.raises(MCPError, match="prompt 'review' has no argument 'colour'"):
            await client.complete(review_ref, {"name": "colour", "value": ""})
        with pytest.raises(MCPError, match="Unknown prompt 'nothing'"):
            await client.complete(
                mcp_types.PromptReference(name="nothing"), {"name": "a", "value": ""}
            )
        unknown = mcp_types.ResourceTemplateReference(uri="docs://readme")  # not a template
        with pytest.raises(MCPError, match="Unknown resource template 'docs://readme'"):
            await client.complete(unknown, {"name": "a", "value": ""})


async def test_a_server_without_resources_or_prompts_declares_neither() -> None:
    app = mcp_http_app(make_agent(Probe()), expose_agent=False)
    async with serving(app) as base, Client(f"{base}/mcp", mode="legacy") as client:
        capabilities = client.server_capabilities
        assert capabilities.resources is None and capabilities.prompts is None
        assert capabilities.completions is None
        with pytest.raises(MCPError):
            await client.list_resources()


async def test_tools_alone_are_served_without_an_agent() -> None:
    agent_tools = list(make_agent(Probe()).tools)
    server = MCPServer(agent_tools, name="toolbox", resources=[readme])
    assert server.agent is None and server.name == "toolbox"
    async with serving(mcp_http_app(server)) as base, Client(f"{base}/mcp") as client:
        assert client.server_info is not None and client.server_info.name == "toolbox"
        names = sorted(t.name for t in (await client.list_tools()).tools)
        assert names == ["add", "explode", "wait"]  # no ask_ tool, no tool needing approval
        assert (await client.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}
        (text,) = (await client.read_resource("docs://readme")).contents
        assert text.text == "# Hello"
    with pytest.raises(BuilderError, match="serves tools only: no agent to prompt"):
        await server.prompt("hello")
    with pytest.raises(BuilderError, match="give the server a name="):
        MCPServer(agent_tools)


async def test_the_mcp_server_is_promptable_and_runs_its_agent() -> None:
    server = _server()
    assert server.name == "helper"
    response = await server.prompt("what is 40 + 2?")
    assert response.text == "the answer is 42"
    events = [event async for event in server.prompt_stream("again")]
    assert events[-1].response.text == "the answer is 42"


# ------------------------------------------------------------------------------ declarations


def test_resource_and_prompt_declarations() -> None:
    assert isinstance(readme, Resource) and not readme.is_template
    assert profile.is_template
    assert profile.match("users://7/profile/name") == {"user_id": "7", "field": "name"}
    assert profile.match("users://7/8/profile/name") is None
    assert readme.match("docs://readme") == {} and readme.match("docs://readme2") is None
    assert isinstance(review, Prompt)
    assert [a.required for a in review.arguments] == [True, False]


def test_a_template_must_name_the_functions_parameters() -> None:
    with pytest.raises(BuilderError, match=r"placeholders \['id'\] must be the parameters"):

        @resource("x://{id}")
        def wrong(key: str) -> str:
            return key

    with pytest.raises(BuilderError, match=r"parameters of static\(\), which are \['extra'\]"):

        @resource("x://static")
        def static(extra: str) -> str:
            return extra


def test_a_prompt_takes_named_parameters_only() -> None:
    with pytest.raises(BuilderError, match="args must be a named parameter"):

        @prompt
        def variadic(*args: str) -> str:
            return ""


def test_duplicate_uris_or_prompt_names_are_refused() -> None:
    agent = make_agent(Probe())
    with pytest.raises(BuilderError, match="resource URI 'docs://readme' is declared twice"):
        MCPServer(agent, resources=[readme, readme])
    with pytest.raises(BuilderError, match="prompt name 'review' is declared twice"):
        MCPServer(agent, prompts=[review, prompt(name="review")(describe_picture.function)])


def test_sync_functions_run_off_the_event_loop() -> None:
    seen: list[bool] = []

    @resource("x://where")
    def where() -> str:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        return "here"

    async def read() -> None:
        await where.read("x://where", {})

    asyncio.run(read())
    assert seen == [False]


async def test_daimon_mcp_serve_serves_an_mcp_server_at_module_attr() -> None:
    from mcp import StdioServerParameters

    path = os.pathsep.join([str(CONFORMANCE), *sys.path])
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "daimon.cli", "mcp", "serve", "server_app:server"],
        env={**os.environ, "PYTHONPATH": path},
    )
    async with Client(params) as client:
        (text,) = (await client.read_resource("test://static-text")).contents
        assert text.text == "This is the content of the static text resource."
        got = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        assert got.messages[0].content.text == "Prompt with arguments: arg1='a', arg2='b'"
        (image,) = (await client.call_tool("test_image_content", {})).content
        assert image.type == "image"
