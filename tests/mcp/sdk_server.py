"""An MCP server written with the official SDK (MCPServer), for daimon's client to talk to.

Run as a script it serves stdio; tests import ``build()`` to serve it over HTTP in-process.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Annotated

import anyio
import mcp_types
from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel


class Profile(BaseModel):
    """What ``ask_user`` asks for; the age has a default (SEP-1034)."""

    name: str
    age: int = 30


def ask_roots() -> ListRoots:
    """Resolves the ``roots`` tool's argument: the client's roots."""
    return ListRoots()


def build(
    slow_cancelled: asyncio.Event | None = None,
    roots_changed: asyncio.Event | None = None,
    slow_started: asyncio.Event | None = None,
) -> MCPServer:
    """The server; ``slow_started`` and ``slow_cancelled`` are set when a ``slow`` call starts
    and is cancelled, ``roots_changed`` when the client says its roots changed."""
    server = MCPServer("sdk-test")

    async def on_roots_changed(ctx: object, params: object) -> None:
        if roots_changed is not None:
            roots_changed.set()

    server._lowlevel_server.add_notification_handler(  # the SDK's MCPServer has no option for it
        "notifications/roots/list_changed", mcp_types.NotificationParams, on_roots_changed
    )

    @server.tool()
    async def roots(listed: Annotated[mcp_types.ListRootsResult, Resolve(ask_roots)]) -> str:
        """The client's roots (roots/list, in either protocol era), as 'name=uri' lines."""
        return "\n".join(f"{root.name}={root.uri}" for root in listed.roots)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def boom() -> str:
        """Always fails."""
        raise ValueError("kaboom")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        if slow_started is not None:
            slow_started.set()
        try:
            await anyio.sleep(seconds)
        except asyncio.CancelledError:
            if slow_cancelled is not None:
                slow_cancelled.set()
            raise
        return "slept"

    @server.tool(name="get.weather")
    def weather(city: str) -> str:
        """A name with a dot, which model providers refuse."""
        return f"sunny in {city}"

    @server.tool()
    async def install(ctx: Context) -> str:
        """Add the tool 'double' and tell clients the tools changed."""
        server.add_tool(lambda x: x * 2, name="double", description="Double x.")
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()
        return "installed"

    @server.tool()
    async def uninstall(ctx: Context) -> str:
        """Remove the tool 'double' and tell clients the tools changed."""
        server.remove_tool("double")
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()
        return "uninstalled"

    @server.tool()
    async def talk(ctx: Context) -> str:
        """Log twice and report progress twice (logging is deprecated by 2026-07-28)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            first = ctx.log("info", "starting", logger_name="talk")
            await first
            await ctx.report_progress(1, 2, "half")
            second = ctx.log("debug", {"detail": 1})
            await second
        await ctx.report_progress(2, 2, "all")
        return "talked"

    @server.tool()
    async def ask_model(question: str, ctx: Context) -> str:
        """Ask the client's model (sampling)."""
        message = mcp_types.SamplingMessage(
            role="user", content=mcp_types.TextContent(type="text", text=question)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            request = ctx.session.create_message(
                [message], max_tokens=20, system_prompt="answer briefly"
            )
        result = await request
        return f"{result.model}: {result.content.text}"  # type: ignore[union-attr]

    @server.tool()
    async def ask_user(ctx: Context) -> str:
        """Ask the client's user for a profile (elicitation)."""
        result = await ctx.elicit("Your profile?", Profile)
        data = result.data.model_dump() if result.action == "accept" else None  # type: ignore[union-attr]
        return f"{result.action} {data}"

    @server.resource("mem://greeting", description="A greeting.")
    def greeting() -> str:
        return "hello from the server"

    @server.resource("mem://blob", mime_type="application/octet-stream")
    def blob() -> bytes:
        return b"\x00\x01\x02"

    @server.resource("mem://items/{item}", description="One item.", mime_type="text/plain")
    def item(item: str) -> str:
        return f"item {item}"

    @server.prompt()
    def explain(topic: str) -> str:
        """Ask for an explanation."""
        return f"Explain {topic} simply."

    return server


if __name__ == "__main__":
    build().run()
