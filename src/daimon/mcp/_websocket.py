"""MCP over WebSocket: one JSON-RPC message per text frame, subprotocol ``mcp``.

The official Python SDK has no WebSocket transport (the TypeScript SDK has a client one), so
both ends are built here on the SDK's session classes, fed through memory streams the way its
stdio transport feeds them: a reader turns each text frame into a message (or a parse error,
answered with a JSON-RPC error as over stdio), a writer sends each outgoing message as one
frame.

The server side is an ASGI app behind daimon's one HTTP gate: the upgrade request's ``Host``
and ``Origin`` are checked and, with a token, its ``Authorization`` header; a refusal closes
the handshake (HTTP 403) before the socket is accepted. A client that does not offer the
``mcp`` subprotocol is refused the same way. A binary frame closes the socket with 1003, a
frame over the size limit with 1009.
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket, WebSocketDisconnect

from daimon._http_gate import DEFAULT_MAX_BODY_BYTES
from daimon.core.errors import BuilderError
from daimon.core.protocols import Promptable
from daimon.mcp._served import MCPServer
from daimon.mcp._server import Gate, answer_malformed, create_mcp_server

__all__ = ("SUBPROTOCOL", "mcp_ws_app", "websocket_client")

SUBPROTOCOL = "mcp"
_UNSUPPORTED_DATA = 1003
_POLICY = 1008
_TOO_BIG = 1009


def mcp_ws_app(
    agent: Promptable | MCPServer,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    max_message_bytes: int = DEFAULT_MAX_BODY_BYTES,
    path: str = "/mcp",
    expose_tools: bool = True,
    expose_agent: bool = True,
) -> ASGIApp:
    """The MCP WebSocket endpoint for ``agent`` (a promptable or an ``MCPServer``), as ASGI.

    Each connection is one MCP session (either protocol era: the client's first request
    decides). The arguments are :func:`~daimon.mcp.mcp_http_app`'s; ``max_message_bytes``
    bounds each frame.

    Raises:
        BuilderError: ``host`` is not a loopback address and no ``token`` is given, the token
            is unusable, an allowed host can never match, or the limit is not positive.
    """
    gate = Gate(host, port, token, allowed_hosts, allowed_origins, max_message_bytes)
    if not path.startswith("/"):
        raise BuilderError(f"path must start with '/', got {path!r}")
    server = create_mcp_server(agent, expose_tools=expose_tools, expose_agent=expose_agent)

    async def endpoint(websocket: WebSocket) -> None:
        if SUBPROTOCOL not in websocket.scope.get("subprotocols", ()):
            await websocket.close(_POLICY, "offer the 'mcp' WebSocket subprotocol")
            return
        await websocket.accept(subprotocol=SUBPROTOCOL)
        await serve_socket(server, websocket, max_message_bytes)

    return gate.around(Starlette(routes=[WebSocketRoute(path, endpoint)]))


def _parsed(text: str) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValidationError as exc:
        return exc


async def _frames(
    websocket: WebSocket, max_bytes: int
) -> AsyncIterator[SessionMessage | Exception]:
    """The messages the client sends, until it disconnects or breaks the rules."""
    while True:
        try:
            frame = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if frame["type"] == "websocket.disconnect":
            return
        text = frame.get("text")
        if text is None:
            await _close(websocket, _UNSUPPORTED_DATA, "MCP over WebSocket is sent in text frames")
            return
        if len(text) > max_bytes or len(text.encode("utf-8")) > max_bytes:
            await _close(websocket, _TOO_BIG, f"a message over the limit of {max_bytes} bytes")
            return
        yield _parsed(text)


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    with contextlib.suppress(Exception):  # the client may be gone already
        await websocket.close(code, reason)


async def _send_frames(
    websocket: WebSocket, outbox: MemoryObjectReceiveStream[SessionMessage]
) -> None:
    async with outbox:
        async for item in outbox:
            text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                await websocket.send_text(text)
            except (WebSocketDisconnect, RuntimeError, OSError):
                return


async def serve_socket(server: Server[Any], websocket: WebSocket, max_bytes: int) -> None:
    """Serve one MCP session on an accepted socket until either side closes it."""
    inbox, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    replies, outbox = anyio.create_memory_object_stream[SessionMessage](0)
    errors = replies.clone()  # the malformed-frame answers share the writer
    async with messages, replies, errors, anyio.create_task_group() as group:
        group.start_soon(_send_frames, websocket, outbox)
        group.start_soon(answer_malformed, _frames(websocket, max_bytes), inbox, errors)
        await server.run(messages, replies, server.create_initialization_options())
        group.cancel_scope.cancel()
    await _close(websocket, 1000, "")


# ------------------------------------------------------------------------------ client


@contextlib.asynccontextmanager
async def websocket_client(
    url: str, headers: Mapping[str, str], *, open_timeout: float, max_message_bytes: int
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
    """Connect to an MCP WebSocket endpoint; yields the streams the SDK's client session reads."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    connection = connect(
        url,
        subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
        additional_headers=dict(headers),
        open_timeout=open_timeout,
        max_size=max_message_bytes,
        proxy=None,
    )
    async with connection as socket:
        if socket.subprotocol != SUBPROTOCOL:
            raise ConnectionError(f"the server did not agree to the {SUBPROTOCOL!r} subprotocol")
        inbox, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        requests, outbox = anyio.create_memory_object_stream[SessionMessage](0)

        async def read() -> None:
            async with inbox:
                with contextlib.suppress(ConnectionClosed):
                    async for frame in socket:
                        text = frame if isinstance(frame, str) else frame.decode("utf-8", "replace")
                        await inbox.send(_parsed(text))

        async def write() -> None:
            async with outbox:
                async for item in outbox:
                    await socket.send(
                        item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    )

        async with messages, requests, anyio.create_task_group() as group:
            group.start_soon(read)
            group.start_soon(write)
            try:
                yield messages, requests
            finally:
                group.cancel_scope.cancel()
