"""daimon.mcp: the Model Context Protocol, both ways.

:class:`MCPClient` connects to an MCP server (stdio, streamable HTTP, WebSocket or HTTP+SSE)
and offers its tools to agents as ordinary daimon tools; :func:`serve_mcp` serves an agent's
tools, and the agent itself as an ``ask_<name>`` tool, to any MCP client over stdio, streamable
HTTP (:func:`mcp_http_app`) or WebSocket (:func:`mcp_ws_app`).
:class:`MCPServer` adds the resources (:func:`resource`) and prompts (:func:`prompt`) it offers;
tools may return :class:`MCPImage`, :class:`MCPAudio`, :class:`MCPEmbeddedResource` and
:class:`MCPResourceLink` content.
A served tool talks to its client through its ``RunContext`` (``ctx.log``,
``ctx.report_progress``, ``ctx.sample``, ``ctx.elicit``); HTTP streams are resumable
(:class:`MCPEventStore`). :class:`MCPClient` answers a server's sampling with a daimon model
and its elicitation with a callback, and signs in with OAuth 2.1 (:class:`MCPOAuth`).

Needs the ``mcp`` extra (``pip install "daimon-agents[mcp]"``). The namespace is lazy: importing
``daimon.mcp`` loads nothing, and the SDK loads with the first name used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports
from daimon.core.optional import require

if TYPE_CHECKING:
    from daimon.mcp._auth import (
        MCPOAuth,
        MCPTokenStore,
        MemoryTokenStore,
        approve_at_once,
        sign_in_with_browser,
    )
    from daimon.mcp._client import MCPClient, MCPTool
    from daimon.mcp._content import (
        MCPAudio,
        MCPContent,
        MCPEmbeddedResource,
        MCPImage,
        MCPResourceLink,
    )
    from daimon.mcp._convert import (
        MCPPrompt,
        MCPPromptArgument,
        MCPResource,
        MCPResourceContents,
        MCPResourceTemplate,
        MCPRoot,
    )
    from daimon.mcp._declare import Prompt, Resource, prompt, resource
    from daimon.mcp._events import MCPEventStore
    from daimon.mcp._served import MCPServer
    from daimon.mcp._server import create_mcp_server, mcp_http_app, serve_mcp
    from daimon.mcp._websocket import mcp_ws_app

__all__ = (
    "MCPAudio",
    "MCPClient",
    "MCPContent",
    "MCPEmbeddedResource",
    "MCPEventStore",
    "MCPImage",
    "MCPOAuth",
    "MCPPrompt",
    "MCPPromptArgument",
    "MCPResource",
    "MCPResourceContents",
    "MCPResourceLink",
    "MCPResourceTemplate",
    "MCPRoot",
    "MCPServer",
    "MCPTokenStore",
    "MCPTool",
    "MemoryTokenStore",
    "Prompt",
    "Resource",
    "approve_at_once",
    "create_mcp_server",
    "mcp_http_app",
    "mcp_ws_app",
    "prompt",
    "resource",
    "serve_mcp",
    "sign_in_with_browser",
)

_LAZY = {
    "MCPAudio": "daimon.mcp._content",
    "MCPContent": "daimon.mcp._content",
    "MCPEmbeddedResource": "daimon.mcp._content",
    "MCPImage": "daimon.mcp._content",
    "MCPResourceLink": "daimon.mcp._content",
    "MCPEventStore": "daimon.mcp._events",
    "MCPServer": "daimon.mcp._served",
    "Prompt": "daimon.mcp._declare",
    "Resource": "daimon.mcp._declare",
    "prompt": "daimon.mcp._declare",
    "resource": "daimon.mcp._declare",
    "MCPClient": "daimon.mcp._client",
    "MCPOAuth": "daimon.mcp._auth",
    "MCPTokenStore": "daimon.mcp._auth",
    "MemoryTokenStore": "daimon.mcp._auth",
    "approve_at_once": "daimon.mcp._auth",
    "sign_in_with_browser": "daimon.mcp._auth",
    "MCPPrompt": "daimon.mcp._convert",
    "MCPPromptArgument": "daimon.mcp._convert",
    "MCPResource": "daimon.mcp._convert",
    "MCPResourceContents": "daimon.mcp._convert",
    "MCPResourceTemplate": "daimon.mcp._convert",
    "MCPRoot": "daimon.mcp._convert",
    "MCPTool": "daimon.mcp._client",
    "create_mcp_server": "daimon.mcp._server",
    "mcp_http_app": "daimon.mcp._server",
    "serve_mcp": "daimon.mcp._server",
    "mcp_ws_app": "daimon.mcp._websocket",
}


def _require_mcp(module: str) -> None:
    require("mcp", extra="mcp")


__getattr__, __dir__ = lazy_exports(globals(), _LAZY, before_load=_require_mcp)
