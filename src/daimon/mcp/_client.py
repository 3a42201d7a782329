"""MCPClient: one MCP server, its tools offered to daimon agents as ordinary tools.

One connection is owned by one background task, so the client can be opened in one task and
used or closed from any other, and a caller that is cancelled mid-close never leaves a server
process behind: the owner finishes the shutdown on its own.
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import asyncio
import contextlib
import inspect
import logging
import math
import os
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, TextIO, TypeVar, cast

import anyio
import httpx2
import mcp_types
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.exceptions import MCPError as SDKError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from daimon.core.errors import BuilderError, MCPError
from daimon.core.messages import Message
from daimon.core.protocols import Model
from daimon.core.tools import ToolOutput
from daimon.kit.lifecycle import AsyncClosing
from daimon.mcp._auth import MCPOAuth, secure_endpoint
from daimon.mcp._convert import (
    MCPPrompt,
    MCPResource,
    MCPResourceContents,
    MCPResourceTemplate,
    MCPRoot,
    input_schema,
    model_tool_name,
    prompt_from_wire,
    prompt_messages,
    resource_contents,
    resource_from_wire,
    template_from_wire,
    tool_output,
)
from daimon.mcp._handlers import (
    ElicitHandler,
    LogHandler,
    RootLike,
    RootsHandler,
    as_roots,
    elicitation_callback,
    logging_callback,
    roots_callback,
    sampling_callback,
)
from daimon.mcp._stdio import guard_available, guarded_command
from daimon.tools import RunContext
from daimon.tools._client import LOG_LEVELS, current_client
from mcp import Client

__all__ = ("MCPClient", "MCPTool")

logger = logging.getLogger("daimon.mcp")

_T = TypeVar("_T")
ProgressHandler = Callable[[float, float | None, str | None], Awaitable[None]]
"""Awaited with each progress report of a tool call: progress, total, message."""
ToolsChanged = Callable[[list["MCPTool"]], Awaitable[None] | None]
"""Called with the new tool list after the server said its tools changed."""

_MAX_PAGES = 100  # a server whose pagination never ends cannot hang the client
_HTTP_TIMEOUT = 30.0
_SSE_READ_TIMEOUT = 300.0  # a server may hold a response stream open this long between events


@dataclass(frozen=True, slots=True)
class _Stdio:
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] | None
    cwd: str | None
    stderr: TextIO | None
    die_with_parent: bool


@dataclass(frozen=True, slots=True)
class _HTTP:
    url: str
    headers: Mapping[str, str]
    legacy_sse: bool
    auth: MCPOAuth | None = None


@dataclass(frozen=True, slots=True)
class _WebSocket:
    url: str
    headers: Mapping[str, str]
    max_message_bytes: int


class MCPTool:
    """One tool of an MCP server, usable by any daimon agent.

    The model calls it by :attr:`name` (the server's name with the client's prefix, and any
    character a model provider would refuse replaced by ``_``); the call goes to the server as
    :attr:`remote_name`. Arguments are validated against :attr:`parameters_schema` by the agent's
    tool registry before they are sent. Errors never escape: a failed or timed-out call, a lost
    connection and a result the server flags ``isError`` all come back as an error result the
    model reads.
    """

    __slots__ = ("_client", "description", "name", "parameters_schema", "remote_name", "title")

    def __init__(self, client: MCPClient, tool: mcp_types.Tool, *, prefix: str = "") -> None:
        self._client = client
        self.remote_name = tool.name
        """The tool's name on the server."""
        self.name = model_tool_name(tool.name, prefix)
        """The name the model calls it by."""
        self.title = tool.title
        self.description = tool.description or tool.title or tool.name
        self.parameters_schema: Mapping[str, Any] = input_schema(tool)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} on {self._client.name!r})"

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """Call the tool on the server; every failure is an error result.

        The server's progress reports go on to the run's own caller (when an MCP client
        called the run: see :meth:`RunContext.report_progress`).
        """
        relay = ctx.report_progress if _has_caller(ctx) else None
        try:
            return await self._client.call_tool(self.remote_name, arguments, on_progress=relay)
        except MCPError as exc:
            return ToolOutput.error(f"Error: {exc}")


class MCPClient(AsyncClosing):
    """A connection to one MCP server, over stdio, streamable HTTP, WebSocket or HTTP+SSE.

    Create one with :meth:`stdio`, :meth:`http`, :meth:`websocket` or :meth:`sse`, then use it
    with ``async with`` (or :meth:`connect` and :meth:`aclose`). Its tools are daimon tools::

        async with MCPClient.stdio("uvx", ["mcp-server-time"]) as time_server:
            agent = Agent(model, tools=await time_server.tools())

    The agent's tools are fixed when it is built; when the server announces that its tools
    changed (``notifications/tools/list_changed``, or a ``subscriptions/listen`` event on
    2026-07-28 connections) the client re-lists them, so the next ``await client.tools()`` (and
    ``on_tools_changed``) sees the new set. Agents built per request pick it up with no extra work.

    Every request carries the current W3C trace context in its ``_meta`` (``traceparent``,
    ``tracestate``, ``baggage``; the official SDK adds them, per SEP-414), so a server that reads
    them (daimon's does) continues the calling agent's trace.

    A stdio server runs as a child process that never outlives the client: closing the client
    stops it (stdin closed, then SIGTERM and SIGKILL to its process group, as the SDK does), and
    on Linux the kernel kills it if the client's process dies without closing (see
    ``die_with_parent``).

    Args:
        name: What logs and errors call the server.
        connect_timeout: Seconds allowed for starting, connecting and the first tool listing.
        call_timeout: Seconds allowed for each request (tool call, read, listing); a timed-out
            tool call is cancelled on the server.
        tool_prefix: Put before every tool name, to keep two servers' tools apart.
        on_tools_changed: Called with the new tools after the server changed them.
        protocol: ``"auto"`` (the newest version both sides speak), ``"legacy"`` (the
            ``initialize`` handshake, 2025-11-25 and before) or a protocol version to adopt.
        max_result_chars: Tool result text beyond this is cut, so one huge result cannot flood
            the model's context.
        sampling_model: Answers the server's sampling requests (``sampling/createMessage``):
            a daimon model, given the server's messages as text. Without one the client does
            not offer sampling.
        on_elicit: Asks the user when the server asks for input (``elicitation/create``):
            called with the server's message and the form's JSON Schema, it returns an
            :class:`~daimon.tools.Elicitation` (or the values, to accept); defaults in the
            schema fill fields it leaves out. Without it the client does not offer elicitation.
        on_log: Called with each log message of the server (level, data, logger); without
            it they go to Python logging, logger ``daimon.mcp.server``.
        log_level: The least severe level of log message wanted (``logging/setLevel`` on
            handshake-era servers that offer logging; the request opt-in on 2026-07-28 ones,
            where no level means no log messages).
        roots: The directories and files servers may work on, answering their ``roots/list``:
            :class:`~daimon.mcp.MCPRoot`, ``file://`` URIs or paths, or a callable (sync or
            async) returning them when asked. Change a list with :meth:`set_roots`. Without
            it the client does not offer roots.
    """

    __slots__ = (
        "_answers",
        "_changed",
        "_client",
        "_closing",
        "_failure",
        "_ready",
        "_roots",
        "_runner",
        "_scope",
        "_target",
        "_tools",
        "call_timeout",
        "connect_timeout",
        "log_level",
        "max_result_chars",
        "name",
        "on_tools_changed",
        "protocol",
        "tool_prefix",
    )

    def __init__(
        self,
        target: _Stdio | _HTTP | _WebSocket,
        *,
        name: str,
        connect_timeout: float = 10.0,
        call_timeout: float = 60.0,
        tool_prefix: str = "",
        on_tools_changed: ToolsChanged | None = None,
        protocol: str = "auto",
        max_result_chars: int = 100_000,
        sampling_model: Model | None = None,
        on_elicit: ElicitHandler | None = None,
        on_log: LogHandler | None = None,
        log_level: str | None = None,
        roots: Sequence[RootLike] | RootsHandler | None = None,
    ) -> None:
        if log_level is not None and log_level not in LOG_LEVELS:
            raise BuilderError(f"log_level must be one of {list(LOG_LEVELS)}, got {log_level!r}")
        limits = {"connect_timeout": connect_timeout, "call_timeout": call_timeout}
        for label, seconds in limits.items():
            if not (isinstance(seconds, int | float) and 0 < seconds < math.inf):
                raise BuilderError(f"{label} must be a positive number of seconds, got {seconds!r}")
        if protocol not in ("auto", "legacy", *MODERN_PROTOCOL_VERSIONS):
            raise BuilderError(
                f"protocol must be 'auto', 'legacy' or one of {list(MODERN_PROTOCOL_VERSIONS)}, "
                f"got {protocol!r}"
            )
        self._target = target
        self.name = name
        self.connect_timeout = float(connect_timeout)
        self.call_timeout = float(call_timeout)
        self.tool_prefix = tool_prefix
        self.on_tools_changed = on_tools_changed
        self.protocol = protocol
        self.max_result_chars = max_result_chars
        self.log_level = log_level
        self._answers: dict[str, Any] = {
            "sampling_callback": (
                None if sampling_model is None else sampling_callback(sampling_model)
            ),
            "elicitation_callback": None if on_elicit is None else elicitation_callback(on_elicit),
            "logging_callback": logging_callback(on_log, name, log_level),
            "list_roots_callback": None,
        }
        self._roots: list[MCPRoot] | RootsHandler | None = None
        if roots is not None:
            self._roots = roots if callable(roots) else as_roots(roots)
            self._answers["list_roots_callback"] = roots_callback(self._current_roots, name)
        self._tools: list[MCPTool] = []
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._closing: anyio.Event | None = None
        self._changed: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._failure: BaseException | None = None

    # ------------------------------------------------------------------------ constructors

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stderr: TextIO | None = None,
        die_with_parent: bool = True,
        name: str | None = None,
        **options: Any,
    ) -> MCPClient:
        """A server started as a child process, spoken to over its stdin and stdout.

        Args:
            command: The program to run.
            args: Its arguments.
            env: Extra environment variables. The server gets only these plus a few safe
                defaults (``PATH``, ``HOME``, ...), never the whole environment.
            cwd: Its working directory.
            stderr: Where its stderr goes (this process's stderr by default); a file with a
                file descriptor.
            die_with_parent: On Linux, start it so that the kernel kills it when this process
                dies, even by SIGKILL.
            name: What logs and errors call it (the command by default).
            **options: The client options of :class:`MCPClient`.
        """
        target = _Stdio(
            command=command,
            args=tuple(args),
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
            stderr=stderr,
            die_with_parent=die_with_parent,
        )
        return cls(target, name=name or os.path.basename(command), **options)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        auth: MCPOAuth | None = None,
        name: str | None = None,
        **options: Any,
    ) -> MCPClient:
        """A server at a streamable HTTP endpoint (usually ending in ``/mcp``).

        Args:
            url: The endpoint.
            headers: Extra HTTP headers for every request.
            token: Sent as ``Authorization: Bearer <token>``.
            auth: OAuth 2.1 (an :class:`~daimon.mcp.MCPOAuth`): tokens are obtained when the
                server first answers 401, refreshed, and the scope stepped up on 403.
            name: What logs and errors call it (the URL by default).
            **options: The client options of :class:`MCPClient`.

        Raises:
            BuilderError: The URL is not HTTP(S), or both ``token`` and ``auth`` are given.
        """
        if auth is not None and token is not None:
            raise BuilderError("MCPClient.http: give a token or auth, not both")
        target = _http(url, headers, token, legacy_sse=False)
        if auth is not None:
            target = _HTTP(url=target.url, headers=target.headers, legacy_sse=False, auth=auth)
        return cls(target, name=name or url, **options)

    @classmethod
    def sse(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> MCPClient:
        """A server on the older HTTP+SSE transport (introduced in 2024-11-05; usually ``/sse``).

        Args:
            url: The SSE endpoint.
            headers: Extra HTTP headers for every request.
            token: Sent as ``Authorization: Bearer <token>``.
            name: What logs and errors call it (the URL by default).
            **options: The client options of :class:`MCPClient`.
        """
        return cls(_http(url, headers, token, legacy_sse=True), name=name or url, **options)

    @classmethod
    def websocket(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        max_message_bytes: int = 16 * 1024 * 1024,
        name: str | None = None,
        **options: Any,
    ) -> MCPClient:
        """A server at a WebSocket endpoint (``ws://`` or ``wss://``, subprotocol ``mcp``).

        Each JSON-RPC message is one text frame. The token (and ``headers``) go on the
        opening handshake, which is where daimon's server checks them.

        Args:
            url: The endpoint.
            headers: Extra HTTP headers for the opening handshake.
            token: Sent as ``Authorization: Bearer <token>``.
            max_message_bytes: The largest message accepted from the server.
            name: What logs and errors call it (the URL by default).
            **options: The client options of :class:`MCPClient`.

        Raises:
            BuilderError: The URL is not ``ws://`` or ``wss://``, or the limit is not positive.
        """
        if not url.startswith(("ws://", "wss://")):
            raise BuilderError(f"an MCP WebSocket URL must be ws:// or wss://, got {url!r}")
        if type(max_message_bytes) is not int or max_message_bytes < 1:
            raise BuilderError(
                f"max_message_bytes must be a positive integer, got {max_message_bytes!r}"
            )
        merged = dict(headers or {})
        if token is not None:
            merged["Authorization"] = f"Bearer {token}"
        target = _WebSocket(url=url, headers=merged, max_message_bytes=max_message_bytes)
        return cls(target, name=name or url, **options)

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        return f"MCPClient({self.name!r}, {state})"

    # ------------------------------------------------------------------------ lifecycle

    @property
    def connected(self) -> bool:
        """Whether the connection is open."""
        return self._client is not None and self._failure is None

    @property
    def protocol_version(self) -> str | None:
        """The protocol version agreed with the server, once connected."""
        client = self._client
        return client.protocol_version if client is not None else None

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def connect(self) -> None:
        """Start (or reach) the server, agree on a protocol and list its tools.

        Raises:
            MCPError: The server could not be started or reached, did not answer within
                ``connect_timeout``, or failed the handshake.
        """
        if self._runner is not None:
            raise MCPError(f"MCP client {self.name!r} is already connected (or was closed)")
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._ready = ready
        self._closing = anyio.Event()
        self._changed = anyio.Event()
        self._runner = loop.create_task(self._run(ready), name=f"daimon.mcp:{self.name}")
        try:
            await asyncio.shield(ready)
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the connection (and stop a stdio server); calling it again does nothing."""
        runner = self._runner
        if runner is None or runner.done():
            self._client = None
            return
        if self._closing is not None:
            self._closing.set()
        if self._scope is not None and not (self._ready is not None and self._ready.done()):
            self._scope.cancel()  # still connecting: give up at once
        # The owner task finishes the shutdown even if this caller is cancelled meanwhile.
        await asyncio.wait({runner})

    async def _run(self, ready: asyncio.Future[None]) -> None:
        try:
            await self._serve(ready)
        finally:
            if not ready.done():  # cancelled from outside before it got anywhere
                ready.set_exception(MCPError(f"MCP client {self.name!r} was cancelled"))

    async def _serve(self, ready: asyncio.Future[None]) -> None:
        closing = self._closing
        assert closing is not None
        with anyio.CancelScope() as scope:
            self._scope = scope
            scope.deadline = anyio.current_time() + self.connect_timeout
            try:
                async with contextlib.AsyncExitStack() as stack:
                    transport = await self._open(stack)
                    client = Client(
                        transport,
                        mode=self.protocol,
                        message_handler=self._on_message,
                        client_info=mcp_types.Implementation(name="daimon", version=_version()),
                        cache=None,  # every listing goes to the server: no stale tools
                        log_level=self.log_level,  # checked in __init__
                        **self._answers,
                    )
                    await stack.enter_async_context(client)
                    await self._set_log_level(client)
                    self._tools = await self._list_tools(client)
                    self._client = client
                    scope.deadline = math.inf
                    if not ready.done():
                        ready.set_result(None)
                    async with anyio.create_task_group() as group:
                        group.start_soon(self._refresh_on_change, client)
                        if _announces_tool_changes(client):
                            group.start_soon(self._listen, client)
                        await closing.wait()
                        group.cancel_scope.cancel()
            except Exception as exc:
                self._failure = exc
                if not ready.done():
                    ready.set_exception(self._connect_error(exc))
                else:
                    logger.warning("MCP server %r: connection failed: %r", self.name, exc)
            finally:
                self._client = None
        if not ready.done():  # the deadline passed, or aclose() gave up on connecting
            what = "closed while connecting" if closing.is_set() else "timed out while connecting"
            ready.set_exception(
                MCPError(
                    f"MCP server {self.name!r} {what}"
                    + ("" if closing.is_set() else f" (connect_timeout={self.connect_timeout:g}s)")
                )
            )

    async def _open(self, stack: contextlib.AsyncExitStack) -> Any:
        target = self._target
        if isinstance(target, _Stdio):
            env = get_default_environment() | dict(target.env or {})
            command, args = target.command, list(target.args)
            if target.die_with_parent and guard_available():
                command, args = guarded_command(command, args, env)
            params = StdioServerParameters(
                command=command, args=args, env=dict(target.env or {}), cwd=target.cwd
            )
            return stdio_client(params, errlog=target.stderr or sys.stderr)
        if isinstance(target, _WebSocket):
            from daimon.mcp._websocket import websocket_client

            return websocket_client(
                target.url,
                target.headers,
                open_timeout=self.connect_timeout,
                max_message_bytes=target.max_message_bytes,
            )
        if target.legacy_sse:
            return sse_client(
                target.url,
                headers=dict(target.headers),
                timeout=_HTTP_TIMEOUT,
                sse_read_timeout=_SSE_READ_TIMEOUT,
            )
        oauth = target.auth
        http = httpx2.AsyncClient(
            headers=dict(target.headers),
            timeout=httpx2.Timeout(_HTTP_TIMEOUT, read=_SSE_READ_TIMEOUT),
            auth=oauth.provider(target.url) if oauth is not None else None,
            event_hooks={"request": [secure_endpoint(target.url)]} if oauth is not None else None,
        )
        await stack.enter_async_context(http)
        return streamable_http_client(target.url, http_client=http)

    async def _set_log_level(self, client: Client) -> None:
        """``logging/setLevel`` on a handshake-era server that offers logging."""
        level = self.log_level
        if level is None or client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        if client.server_capabilities.logging is None:
            return
        with warnings.catch_warnings():  # deprecated by the 2026-07-28 protocol, not by daimon
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            request = client.set_logging_level(level)
        with anyio.fail_after(self.call_timeout):
            await request

    def _connect_error(self, exc: BaseException) -> MCPError:
        if isinstance(exc, MCPError):
            return exc
        error = MCPError(f"could not connect to MCP server {self.name!r}: {_describe(exc)}")
        error.__cause__ = exc
        return error

    # ------------------------------------------------------------------------ tools

    async def tools(self) -> list[MCPTool]:
        """The server's tools, as daimon tools (listed at connect, re-listed when they change).

        Raises:
            MCPError: The client is not connected.
        """
        self._connection()
        return list(self._tools)

    async def refresh_tools(self) -> list[MCPTool]:
        """List the server's tools again now.

        Raises:
            MCPError: The listing failed or timed out, or the client is not connected.
        """
        self._tools = await self._request("tools/list", self._list_tools(self._connection()))
        return list(self._tools)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_progress: ProgressHandler | None = None,
    ) -> ToolOutput:
        """Call a tool by its name on the server.

        A result the server flags ``isError`` is returned as an error ``ToolOutput``.
        ``on_progress`` is awaited with each progress report of the call (``progress``,
        ``total``, ``message``); the call asks for them only when it is given.

        Raises:
            MCPError: The call failed at the protocol level (unknown tool, invalid params, a
                lost connection) or timed out (and was then cancelled on the server).
        """
        client = self._connection()
        seconds = self.call_timeout
        try:
            # The SDK's own timeout cancels the call on the server; this one is the backstop
            # for a transport that cannot even send.
            with anyio.fail_after(seconds + 1.0):
                result = await client.call_tool(
                    name,
                    dict(arguments or {}),
                    read_timeout_seconds=seconds,
                    progress_callback=cast("ProgressFnT | None", on_progress),
                )
        except TimeoutError as exc:
            raise MCPError(
                f"MCP server {self.name!r}: tool {name!r} timed out after {seconds:g}s"
            ) from exc
        except SDKError as exc:
            raise self._sdk_error(exc, f"tool {name!r}", seconds) from exc
        except Exception as exc:  # transport failures: closed pipes, HTTP errors, bad replies
            raise MCPError(
                f"MCP server {self.name!r}: tool {name!r} failed: {_describe(exc)}"
            ) from exc
        return tool_output(result, max_chars=self.max_result_chars)

    async def _list_tools(self, client: Client) -> list[MCPTool]:
        async def page(cursor: str | None) -> mcp_types.ListToolsResult:
            with anyio.fail_after(self.call_timeout):
                return await client.list_tools(cursor=cursor)

        return await _all_pages(
            page, lambda listed: (MCPTool(self, t, prefix=self.tool_prefix) for t in listed.tools)
        )

    def _tools_changed(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def _on_message(self, message: mcp_types.ServerNotification | Exception) -> None:
        # Runs inside the session's receive loop: it must not wait on a request, so the
        # re-listing happens in _refresh_on_change.
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools_changed()
        elif isinstance(message, Exception):
            logger.warning("MCP server %r sent something unreadable: %r", self.name, message)

    async def _listen(self, client: Client) -> None:
        """On 2026-07-28 connections, change events come on a ``subscriptions/listen`` stream."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._tools_changed()
        except (ListenNotSupportedError, SubscriptionLost, SDKError) as exc:
            logger.info("MCP server %r: no tool change events (%s)", self.name, exc)
        except Exception as exc:  # a broken stream must not take the connection down
            logger.warning("MCP server %r: tool change stream failed: %r", self.name, exc)

    async def _refresh_on_change(self, client: Client) -> None:
        while True:
            assert self._changed is not None
            await self._changed.wait()
            self._changed = anyio.Event()  # a change during the re-listing counts again
            try:
                self._tools = await self._list_tools(client)
            except Exception as exc:  # keep the old tools; the next change tries again
                logger.warning("MCP server %r: re-listing tools failed: %r", self.name, exc)
                continue
            callback = self.on_tools_changed
            if callback is not None:
                try:
                    outcome = callback(list(self._tools))
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    logger.exception("MCP server %r: on_tools_changed raised", self.name)

    # ------------------------------------------------------------------------ roots

    def _current_roots(self) -> Any:
        roots = self._roots
        return roots() if callable(roots) else list(roots or ())

    async def set_roots(self, roots: Sequence[RootLike] | RootsHandler) -> None:
        """Replace the roots (a list, or a callable), and tell the server they changed.

        Raises:
            MCPError: The client was built without ``roots`` (it did not offer roots).
            BuilderError: A root is not a ``file://`` URI or a path.
        """
        if self._roots is None:
            raise MCPError(f"MCP client {self.name!r} was built without roots= (none offered)")
        self._roots = roots if callable(roots) else as_roots(roots)
        await self.roots_changed()

    async def roots_changed(self) -> None:
        """Tell the server the roots changed (``notifications/roots/list_changed``).

        Handshake-era connections only: on 2026-07-28 ones the notification no longer exists
        and servers ask for the roots each time they need them. Nothing is sent before the
        client connects (the server has not asked yet).

        Raises:
            MCPError: The notification could not be sent.
        """
        client = self._client
        if client is None or self._roots is None:
            return
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        with warnings.catch_warnings():  # deprecated by the 2026-07-28 protocol, not by daimon
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self._request(
                "notifications/roots/list_changed", client.send_roots_list_changed()
            )

    # ------------------------------------------------------------------------ resources, prompts

    async def list_resource_templates(self) -> list[MCPResourceTemplate]:
        """The resource templates (URI templates) the server offers.

        Raises:
            MCPError: The request failed or timed out.
        """
        client = self._connection()
        fetch = _all_pages(
            lambda cursor: client.list_resource_templates(cursor=cursor),
            lambda page: map(template_from_wire, page.resource_templates),
        )
        return await self._request("resources/templates/list", fetch)

    async def list_resources(self) -> list[MCPResource]:
        """The resources the server offers.

        Raises:
            MCPError: The request failed or timed out.
        """
        client = self._connection()
        fetch = _all_pages(
            lambda cursor: client.list_resources(cursor=cursor),
            lambda page: map(resource_from_wire, page.resources),
        )
        return await self._request("resources/list", fetch)

    async def read_resource(self, uri: str) -> list[MCPResourceContents]:
        """Read a resource: its text, or bytes for binary contents.

        Raises:
            MCPError: The resource does not exist, or the request failed or timed out.
        """
        client = self._connection()
        result = await self._request(f"resource {uri!r}", client.read_resource(uri))
        return resource_contents(result)

    async def list_prompts(self) -> list[MCPPrompt]:
        """The prompt templates the server offers.

        Raises:
            MCPError: The request failed or timed out.
        """
        client = self._connection()
        fetch = _all_pages(
            lambda cursor: client.list_prompts(cursor=cursor),
            lambda page: map(prompt_from_wire, page.prompts),
        )
        return await self._request("prompts/list", fetch)

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None
    ) -> list[Message]:
        """A prompt template rendered by the server, as messages to start a conversation with.

        Raises:
            MCPError: The prompt does not exist, an argument is missing, or the request failed.
        """
        client = self._connection()
        result = await self._request(
            f"prompt {name!r}", client.get_prompt(name, dict(arguments or {}))
        )
        return prompt_messages(result)

    # ------------------------------------------------------------------------ plumbing

    def _connection(self) -> Client:
        client = self._client
        if client is None or self._failure is not None:
            state = "lost its connection" if self._failure is not None else "is not connected"
            raise MCPError(f"MCP client {self.name!r} {state}")
        return client

    async def _request(self, what: str, request: Awaitable[_T]) -> _T:
        try:
            with anyio.fail_after(self.call_timeout):
                return await request
        except TimeoutError as exc:
            raise MCPError(
                f"MCP server {self.name!r}: {what} timed out after {self.call_timeout:g}s"
            ) from exc
        except SDKError as exc:
            raise self._sdk_error(exc, what, self.call_timeout) from exc
        except Exception as exc:
            raise MCPError(f"MCP server {self.name!r}: {what} failed: {_describe(exc)}") from exc

    def _sdk_error(self, exc: SDKError, what: str, seconds: float) -> MCPError:
        if exc.code == mcp_types.REQUEST_TIMEOUT:
            return MCPError(f"MCP server {self.name!r}: {what} timed out after {seconds:g}s")
        if exc.code == mcp_types.CONNECTION_CLOSED:
            return MCPError(f"MCP server {self.name!r} closed the connection during {what}")
        return MCPError(f"MCP server {self.name!r}: {what} failed: {exc.message} ({exc.code})")


def _has_caller(ctx: RunContext[Any]) -> bool:
    return ctx.client is not None or current_client.get() is not None


def _http(
    url: str, headers: Mapping[str, str] | None, token: str | None, *, legacy_sse: bool
) -> _HTTP:
    if not url.startswith(("http://", "https://")):
        raise BuilderError(f"an MCP server URL must be http:// or https://, got {url!r}")
    merged = dict(headers or {})
    if token is not None:
        merged["Authorization"] = f"Bearer {token}"
    return _HTTP(url=url, headers=merged, legacy_sse=legacy_sse)


class _Page(Protocol):
    @property
    def next_cursor(self) -> str | None: ...


_P = TypeVar("_P", bound=_Page)


async def _all_pages(
    list_page: Callable[[str | None], Awaitable[_P]], items: Callable[[_P], Iterable[_T]]
) -> list[_T]:
    """Every item of a paginated MCP listing, following cursors for at most ``_MAX_PAGES``."""
    found: list[_T] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await list_page(cursor)
        found.extend(items(page))
        cursor = page.next_cursor
        if cursor is None:
            break
    return found


def _announces_tool_changes(client: Client) -> bool:
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False  # handshake-era servers send notifications/tools/list_changed unasked
    tools = client.server_capabilities.tools
    return bool(tools and tools.list_changed)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _version() -> str:
    from daimon import __version__

    return __version__
