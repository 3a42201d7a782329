"""Serving an agent over MCP: its tools, and the agent itself as an ``ask_<name>`` tool.

An :class:`~daimon.mcp.MCPServer` adds resources, prompts and completions
(:mod:`daimon.mcp._served`); tools may return rich content and typed results
(:mod:`daimon.mcp._convert`).

Over streamable HTTP the server is closed by default:

* it binds 127.0.0.1 unless told otherwise, and refuses to start on any other address without
  a bearer token;
* every request must carry the token when one is set (compared in constant time); a session id
  only routes requests, it never stands in for the token;
* the ``Host`` header must name an allowed host and an ``Origin`` header, when present, an
  allowed origin or the request's own (DNS-rebinding protection); anything else is answered 403;
* a request body over ``max_body_bytes`` (1 MiB by default) is answered 413 before it is read;
* these checks are daimon's one HTTP gate (the same rules as ``daimon.server`` and
  ``daimon.a2a``), answering in plain text;
* a tool that raises becomes an ``isError`` result, and a malformed JSON-RPC message an error
  response: the server keeps serving.

Cancellation follows the protocol version the client chose. On handshake-era connections
(2025-11-25 and before) a client disconnect never cancels a running tool; only the client's
``notifications/cancelled`` does. On 2026-07-28 connections the specification makes closing the
request's response stream the cancellation signal over HTTP, so that is honoured instead.

Each tool call continues the caller's trace: the W3C trace context the request's ``_meta``
carries (``traceparent``, ``tracestate``, ``baggage``; SEP-414, sent by the official SDK and so
by :class:`~daimon.mcp.MCPClient`), or else a ``traceparent`` header on streamable HTTP, is the
parent of the spans the tool starts (an instrumented agent's run). Without OpenTelemetry set up
this costs nothing, and a malformed ``traceparent`` only means a new trace.
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import contextlib
import re
import uuid
import warnings
from collections.abc import AsyncIterable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventStore
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.message import SessionMessage
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from daimon._http_gate import (
    DEFAULT_MAX_BODY_BYTES,
    HttpGate,
    check_exposure,
    check_limit,
    hosts_for,
)
from daimon.core.errors import ApprovalRequiredError, BuilderError, RunCancelled
from daimon.core.messages import ToolCall
from daimon.core.protocols import Promptable
from daimon.core.tools import ToolOutput
from daimon.kit.lifecycle import serve_until_cancelled
from daimon.mcp._caller import LogLevels, MCPCaller
from daimon.mcp._convert import call_tool_result, mcp_tool, output_schema
from daimon.mcp._events import MCPEventStore
from daimon.mcp._served import MCPServer, extra_handlers
from daimon.telemetry._propagation import extract_trace_context, inject_trace_context
from daimon.tools import EndRun, RunContext, Tool, ToolRegistry
from daimon.tools._client import current_client

__all__ = ("create_mcp_server", "mcp_http_app", "serve_mcp")

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_TRACE_KEYS = ("traceparent", "tracestate", "baggage")  # SEP-414: W3C names, in _meta


class _AskAgent:
    """The agent (any promptable) itself, as a tool: one prompt in, the final answer out."""

    __slots__ = ("_agent", "description", "name", "parameters_schema")

    def __init__(self, agent: Promptable) -> None:
        self._agent = agent
        self.name = ("ask_" + _NAME_CHARS.sub("_", agent.name))[:64]
        self.description = (
            f"Ask the {agent.name!r} agent. It works the request out with its own tools and "
            "answers in text. Each call is a new conversation."
        )
        self.parameters_schema: Mapping[str, Any] = {
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "What to ask the agent."}},
            "required": ["prompt"],
            "additionalProperties": False,
        }

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        try:
            response = await self._agent.prompt(str(arguments["prompt"]), cancel=ctx.cancel)
            response.require_finished("an MCP tool call")
        except ApprovalRequiredError as exc:  # paused, or a network or flow that cannot pause
            return ToolOutput.error(f"Error: {exc}")
        return ToolOutput(content=response.text, data=_jsonable(response.output))


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, dict) else None


def _exposed(served: MCPServer, *, expose_tools: bool, expose_agent: bool) -> ToolRegistry:
    agent = served.agent
    own = served.tools if agent is None else getattr(agent, "tools", None)
    tools: list[Tool] = []
    if expose_tools and isinstance(own, ToolRegistry | tuple):  # a team or flow has none
        # A tool that needs a person's approval is never handed to a remote caller.
        tools.extend(t for t in own if not getattr(t, "requires_approval", False))
    if expose_agent and agent is not None:
        tools.append(_AskAgent(agent))
    return ToolRegistry(tools)


def create_mcp_server(
    agent: Promptable | MCPServer,
    *,
    expose_tools: bool = True,
    expose_agent: bool = True,
    name: str | None = None,
    instructions: str | None = None,
) -> Server[Any]:
    """An MCP server (the SDK's low-level ``Server``) offering ``agent``'s tools.

    ``agent`` is any :class:`~daimon.core.protocols.Promptable`, or an :class:`MCPServer` adding
    resources and prompts to one. An Agent offers its tools and itself; a Supervisor, a
    HandoffNetwork or a flow offers itself only (``ask_<name>``). A run that pauses for
    approvals (or a team or flow whose agent does) answers an error result naming the tools.
    Tools that need approval are left out. Arguments are validated against each tool's schema
    before it runs; every failure (invalid arguments, a tool that raises, a timeout, an agent
    run that fails) is an ``isError`` result the caller can read. An unknown resource or prompt,
    a missing prompt argument, or a resource or prompt function that raises is a JSON-RPC error.

    Args:
        agent: The agent (or any promptable) to serve.
        expose_tools: Offer the agent's own tools (an Agent's; other promptables have none).
        expose_agent: Offer the agent itself as ``ask_<agent name>``.
        name: The server's name (the agent's by default).
        instructions: Told to clients that read server instructions.

    Raises:
        DuplicateToolError: The agent has a tool called ``ask_<agent name>`` itself.
    """
    extras = agent if isinstance(agent, MCPServer) else MCPServer(agent)
    registry = _exposed(extras, expose_tools=expose_tools, expose_agent=expose_agent)
    outputs = {t.name: output_schema(t) for t in registry}
    listed = mcp_types.ListToolsResult(
        tools=[mcp_tool(spec, outputs.get(spec.name)) for spec in registry.specs]
    )
    schemas = {spec.name: dict(spec.parameters) for spec in registry.specs}
    levels = LogLevels()

    async def list_tools(
        ctx: Any, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return listed

    async def call_tool(
        ctx: Any, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        request_id = getattr(ctx, "request_id", None)
        call = ToolCall(
            id=str(request_id if request_id is not None else uuid.uuid4().hex),
            name=params.name,
            arguments=dict(params.arguments or {}),
        )
        output = await _run_call(registry, call, MCPCaller(ctx, levels), ctx)
        return call_tool_result(output, outputs.get(call.name))

    with warnings.catch_warnings():  # logging is deprecated by 2026-07-28, not by daimon
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return Server(
            name or extras.name,
            version=_version(),
            instructions=instructions if instructions is not None else extras.instructions,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_set_logging_level=levels.set_level,
            get_tool_input_schema=schemas.get,
            **extra_handlers(extras),
        )


async def _run_call(
    registry: ToolRegistry, call: ToolCall, caller: MCPCaller, ctx: Any
) -> ToolOutput:
    """Run one ``tools/call``: its tool, with the MCP client as the run's caller."""
    run_ctx: RunContext[Any] = RunContext(
        run_id=f"mcp-{uuid.uuid4().hex}",
        deps=None,
        call_id=call.id,
        tool_name=call.name,
        client=caller,
    )
    token = current_client.set(caller)  # for the tools of an agent run this call starts
    try:
        with _caller_trace(ctx):
            return await registry.run(call, run_ctx)
    except EndRun as signal:
        return ToolOutput(content=signal.text if signal.text is not None else str(signal))
    except RunCancelled as exc:
        return ToolOutput.error(f"Error: {exc}")
    except Exception as exc:  # never a crash: the caller reads what went wrong
        return ToolOutput.error(f"Error: {type(exc).__name__}: {exc}")
    except BaseException:  # the request was cancelled: tell the tool too
        run_ctx.cancel.cancel("the MCP request was cancelled")
        raise
    finally:
        current_client.reset(token)


def _trace_carrier(ctx: Any) -> dict[str, str] | None:
    """The caller's trace context: from the request's ``_meta``, else from its HTTP headers."""
    sources = (getattr(ctx, "meta", None), getattr(getattr(ctx, "request", None), "headers", None))
    for source in sources:
        if not isinstance(source, Mapping):
            continue
        found = {key: source[key] for key in _TRACE_KEYS if isinstance(source.get(key), str)}
        if "traceparent" in found:
            return found
    return None


def _trace_id(traceparent: str | None) -> str | None:
    parts = traceparent.strip().lower().split("-") if traceparent else []
    return parts[1] if len(parts) >= 4 else None


def _caller_trace(ctx: Any) -> contextlib.AbstractContextManager[None]:
    """Run a tool call inside the caller's trace, with the caller's baggage.

    The SDK's own server span usually continues a ``_meta`` trace already (but drops its
    baggage); that span is then kept as the parent and only the baggage is added. Otherwise (no
    SDK span, or the trace came in an HTTP header) the whole carrier is attached for the call.
    """
    carrier = _trace_carrier(ctx)
    if carrier is None:
        return contextlib.nullcontext()
    current = inject_trace_context({}).get("traceparent")
    if current is not None and _trace_id(current) == _trace_id(carrier["traceparent"]):
        carrier = {key: value for key, value in carrier.items() if key == "baggage"}
    return extract_trace_context(carrier)


# ------------------------------------------------------------------------------ HTTP


@dataclass(frozen=True, slots=True)
class Gate:
    """The gate in front of an MCP endpoint (HTTP or WebSocket), checked when it is made.

    Raises:
        BuilderError: ``host`` is not a loopback address and no ``token`` is given, the token
            is unusable, or ``max_bytes`` is not positive.
    """

    host: str
    port: int | None
    token: str | None
    allowed_hosts: Iterable[str]
    allowed_origins: Iterable[str]
    max_bytes: int

    def __post_init__(self) -> None:
        check_exposure(self.host, self.token)
        check_limit(self.max_bytes)  # before the SDK's own check, which raises ValueError

    def around(self, app: ASGIApp) -> ASGIApp:
        """``app`` behind daimon's HTTP gate, refusals in plain text."""
        return HttpGate(
            app,
            hosts=hosts_for(self.host, self.port, self.allowed_hosts),
            origins=self.allowed_origins,
            token=self.token,
            max_body_bytes=self.max_bytes,
            errors="text",
        )


def mcp_http_app(
    agent: Promptable | MCPServer,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    path: str = "/mcp",
    expose_tools: bool = True,
    expose_agent: bool = True,
    resumable: bool = True,
    event_store: EventStore | None = None,
    retry_ms: int = 1000,
) -> ASGIApp:
    """The streamable HTTP MCP endpoint for ``agent``, as an ASGI app (Starlette).

    Args:
        agent: The agent to serve.
        host: The address it will be bound to; decides the defaults below.
        port: The port it will be bound to: the default ``Host`` names must carry it (any port
            when ``None`` or 0).
        token: The bearer token every request must carry: visible ASCII, no spaces. Required
            unless ``host`` is a loopback address.
        allowed_hosts: ``Host`` patterns allowed besides the defaults (the loopback names, and
            ``host`` itself on a specific address; none on a wildcard bind, where, without
            this, the ``Host`` header is not checked; the token still is): ``name`` (any port),
            ``name:port``, ``*.domain[:port]`` or ``*``.
        allowed_origins: Origins (``scheme://host[:port]``) allowed to call from a browser,
            besides the request's own origin. Requests with no ``Origin`` header (any
            non-browser client) are unaffected.
        max_body_bytes: The largest request body accepted (413 beyond it).
        path: Where the endpoint is.
        expose_tools: Offer the agent's own tools.
        expose_agent: Offer the agent itself as ``ask_<agent name>``.
        resumable: Keep recent SSE events so a client that loses a stream resumes it with
            ``Last-Event-ID`` (SEP-1699): streams open with a priming event carrying
            ``retry_ms`` (clients of 2025-11-25 and later).
        event_store: Where the events are kept: an :class:`MCPEventStore` of the last 1024
            events by default; any SDK ``EventStore`` (a shared one, for several processes).
        retry_ms: How long a client waits before reconnecting a stream that closed.

    Raises:
        BuilderError: ``host`` is not a loopback address and no ``token`` is given, the token
            is empty or not visible ASCII, an allowed host can never match, or ``retry_ms``
            is negative.
    """
    if retry_ms < 0:
        raise BuilderError(f"retry_ms must be 0 or more, got {retry_ms}")
    gate = Gate(host, port, token, allowed_hosts, allowed_origins, max_body_bytes)
    server = create_mcp_server(agent, expose_tools=expose_tools, expose_agent=expose_agent)
    # The gate in front is the one check of Host and Origin (the SDK's own cannot spell its
    # wildcards) and of the body size (the SDK's limit is set to the same).
    manager = StreamableHTTPSessionManager(
        app=server,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=max_body_bytes,
        event_store=(event_store or MCPEventStore()) if resumable else None,
        retry_interval=retry_ms if resumable else None,
    )
    app = Starlette(
        routes=[Route(path, endpoint=StreamableHTTPASGIApp(manager))],
        lifespan=lambda _app: manager.run(),
    )
    return gate.around(app)


# ------------------------------------------------------------------------------ serving


async def serve_mcp(
    agent: Promptable | MCPServer,
    *,
    transport: Literal["stdio", "http", "ws"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    path: str = "/mcp",
    expose_tools: bool = True,
    expose_agent: bool = True,
    resumable: bool = True,
    event_store: EventStore | None = None,
    retry_ms: int = 1000,
) -> None:
    """Serve ``agent`` over MCP until stdin closes (stdio) or the server is stopped (HTTP, ws).

    Over stdio the process's stdout carries the protocol, so anything else printing to stdout
    while serving goes to stderr instead; the server stops when its stdin closes. Over HTTP the
    endpoint is ``http://<host>:<port><path>``, guarded as :func:`mcp_http_app` describes, and
    uvicorn stops it on SIGINT or SIGTERM. ``resumable``, ``event_store`` and ``retry_ms`` are
    :func:`mcp_http_app`'s (HTTP only). Over WebSocket (``"ws"``) the endpoint is
    ``ws://<host>:<port><path>`` (:func:`~daimon.mcp.mcp_ws_app`, behind the same checks;
    ``max_body_bytes`` bounds each message).

    Raises:
        BuilderError: An HTTP server on a non-loopback address was given no token (it refuses
            to start), or ``transport`` is unknown.
    """
    if transport == "stdio":
        server = create_mcp_server(agent, expose_tools=expose_tools, expose_agent=expose_agent)
        await _serve_stdio(server)
        return
    if transport not in ("http", "ws"):
        raise BuilderError(f"transport must be 'stdio', 'http' or 'ws', got {transport!r}")
    import uvicorn

    gate: dict[str, Any] = {
        "host": host,
        "port": port,
        "token": token,
        "allowed_hosts": allowed_hosts,
        "allowed_origins": allowed_origins,
        "path": path,
        "expose_tools": expose_tools,
        "expose_agent": expose_agent,
    }
    if transport == "ws":
        from daimon.mcp._websocket import mcp_ws_app

        app = mcp_ws_app(agent, max_message_bytes=max_body_bytes, **gate)
    else:
        app = mcp_http_app(
            agent,
            max_body_bytes=max_body_bytes,
            resumable=resumable,
            event_store=event_store,
            retry_ms=retry_ms,
            **gate,
        )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=5
    )
    await serve_until_cancelled(uvicorn.Server(config))


class _Sender(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


async def _serve_stdio(server: Server[Any]) -> None:
    """Serve over stdin/stdout until stdin closes; malformed lines get a JSON-RPC error back."""
    async with stdio_server() as (read_stream, write_stream):
        inbox, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        async with anyio.create_task_group() as group:
            group.start_soon(answer_malformed, read_stream, inbox, write_stream)
            await server.run(messages, write_stream, server.create_initialization_options())
            group.cancel_scope.cancel()


async def answer_malformed(
    source: AsyncIterable[SessionMessage | Exception],
    inbox: MemoryObjectSendStream[SessionMessage | Exception],
    replies: _Sender,
) -> None:
    """Pass messages on; answer a line that is not JSON-RPC (the SDK would drop it silently)."""
    async with inbox:
        async for item in source:
            if not isinstance(item, Exception):
                await inbox.send(item)
                continue
            error = _malformed_error(item)
            await replies.send(
                SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=None, error=error))
            )


def _malformed_error(exc: Exception) -> mcp_types.ErrorData:
    not_json = isinstance(exc, ValidationError) and any(
        e["type"] == "json_invalid" for e in exc.errors()
    )
    if not_json:
        return mcp_types.ErrorData(code=mcp_types.PARSE_ERROR, message="Parse error: not JSON")
    return mcp_types.ErrorData(
        code=mcp_types.INVALID_REQUEST, message="Invalid request: not a JSON-RPC 2.0 message"
    )


def _version() -> str:
    from daimon import __version__

    return __version__
