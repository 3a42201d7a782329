"""MCP over WebSocket: daimon's server and client, and the TypeScript SDK's client transport."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from daimon.core.errors import BuilderError, MCPError
from daimon.mcp import MCPClient, mcp_ws_app, serve_mcp

from .conftest import HERE, Probe, make_agent, serving

PINNED = HERE / "conformance"
TS_CLIENT = HERE / "ts_ws_client.mjs"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}


def _ws(base: str) -> str:
    return base.replace("http://", "ws://", 1) + "/mcp"


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_the_daimon_client_and_server_over_websocket(protocol: str) -> None:
    async with (
        serving(mcp_ws_app(make_agent(Probe()))) as base,
        MCPClient.websocket(_ws(base), protocol=protocol) as client,
    ):
        expected = "2025-11-25" if protocol == "legacy" else "2026-07-28"
        assert client.protocol_version == expected
        names = {t.name for t in await client.tools()}
        assert names == {"add", "explode", "wait", "ask_helper"}
        assert (await client.call_tool("add", {"a": 2, "b": 3})).content == "5"
        exploded = await client.call_tool("explode", {})
        assert exploded.is_error
        assert "exploded on purpose" in str(exploded.content)
        assert "the answer is 42" in str(
            (await client.call_tool("ask_helper", {"prompt": "x"})).content
        )


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_cancelled_call_reaches_the_tool_on_the_server(protocol: str) -> None:
    probe = Probe()
    async with (
        serving(mcp_ws_app(make_agent(probe))) as base,
        MCPClient.websocket(_ws(base), protocol=protocol) as client,
    ):
        call = asyncio.create_task(client.call_tool("wait", {"seconds": 60}))
        await asyncio.wait_for(probe.started.wait(), 30)
        call.cancel()
        await asyncio.wait_for(probe.cancelled.wait(), 30)
        assert probe.context is not None and probe.context.cancel.cancelled
        assert (await client.call_tool("add", {"a": 1, "b": 1})).content == "2"


async def test_one_message_per_text_frame_and_malformed_frames_get_an_error() -> None:
    async with (
        serving(mcp_ws_app(make_agent(Probe()))) as base,
        connect(_ws(base), subprotocols=["mcp"]) as socket,  # type: ignore[list-item]
    ):
        assert socket.subprotocol == "mcp"
        for frame, code in (("{not json", -32700), ('{"hello": 1}', -32600)):
            await socket.send(frame)
            answer = json.loads(await asyncio.wait_for(socket.recv(), 30))
            assert answer["error"]["code"] == code
        await socket.send(json.dumps(INITIALIZE))
        answer = json.loads(await asyncio.wait_for(socket.recv(), 30))
        assert answer["id"] == 1 and answer["result"]["protocolVersion"] == "2025-11-25"
        await socket.send(b"\x00binary")
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003


async def test_a_frame_over_the_limit_closes_the_socket() -> None:
    app = mcp_ws_app(make_agent(Probe()), max_message_bytes=1024)
    async with serving(app) as base, connect(_ws(base), subprotocols=["mcp"]) as socket:  # type: ignore[list-item]
        await socket.send(json.dumps({**INITIALIZE, "padding": "x" * 2000}))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_host_origin_and_subprotocol_are_checked_before_the_socket_opens() -> None:
    async with serving(mcp_ws_app(make_agent(Probe()))) as base:
        url = _ws(base)
        port = base.rsplit(":", 1)[1]
        refusals: list[dict[str, Any]] = [
            {"origin": "http://attacker.example", "subprotocols": ["mcp"]},
            {"origin": f"http://localhost:{port}", "subprotocols": ["mcp"]},  # not its own Host
            {},  # no mcp subprotocol offered
        ]
        for options in refusals:
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, **options):
                    pass
            assert refused.value.response.status_code == 403, options
        # DNS rebinding: a name that resolves here, but is not an allowed Host
        rebound = f"ws://attacker.example:{port}/mcp"
        with pytest.raises(InvalidStatus) as refused:
            async with connect(rebound, subprotocols=["mcp"], host="127.0.0.1", port=int(port)):  # type: ignore[list-item]
                pass
        assert refused.value.response.status_code == 403
        async with connect(url, origin=f"http://127.0.0.1:{port}", subprotocols=["mcp"]) as ok:  # type: ignore[arg-type, list-item]
            assert ok.subprotocol == "mcp"
        client = MCPClient.websocket(url, headers={"Origin": "http://attacker.example"})
        with pytest.raises(MCPError, match="could not connect"):
            await client.connect()


async def test_a_bearer_token_is_required_when_set() -> None:
    app = mcp_ws_app(make_agent(Probe()), token="s3cret-token")
    async with serving(app) as base:
        url = _ws(base)
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, subprotocols=["mcp"], additional_headers=headers):  # type: ignore[list-item]
                    pass
            assert refused.value.response.status_code == 403
        with pytest.raises(MCPError, match="could not connect"):
            await MCPClient.websocket(url, connect_timeout=20).connect()
        async with MCPClient.websocket(url, token="s3cret-token") as client:
            assert (await client.call_tool("add", {"a": 2, "b": 2})).content == "4"


def test_bad_settings_are_refused() -> None:
    agent = make_agent(Probe())
    with pytest.raises(BuilderError, match="without authentication"):
        mcp_ws_app(agent, host="0.0.0.0")
    with pytest.raises(BuilderError, match="ws:// or wss://"):
        MCPClient.websocket("http://127.0.0.1:1/mcp")
    with pytest.raises(BuilderError, match="max_message_bytes"):
        MCPClient.websocket("ws://127.0.0.1:1/mcp", max_message_bytes=0)


async def test_serve_mcp_refuses_ws_off_loopback_without_a_token() -> None:
    with pytest.raises(BuilderError, match="without authentication"):
        await serve_mcp(make_agent(Probe()), transport="ws", host="0.0.0.0")
    with pytest.raises(BuilderError, match="'stdio', 'http' or 'ws'"):
        await serve_mcp(make_agent(Probe()), transport="carrier-pigeon")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ TypeScript SDK


def _node_modules() -> Path:
    """The TypeScript SDK installed by ./scripts/mcp-conformance-setup, at the pinned version."""
    configured = os.environ.get("DAIMON_MCP_CONFORMANCE_DIR")
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    directory = Path(configured) if configured else Path(cache) / "daimon" / "mcp-conformance"
    pinned = (PINNED / "package.json").read_bytes() + (PINNED / "package-lock.json").read_bytes()
    stamp = directory / ".installed"
    if not stamp.is_file() or stamp.read_text().strip() != hashlib.sha256(pinned).hexdigest():
        message = (
            f"the pinned TypeScript MCP SDK is not installed at {directory} "
            "(run ./scripts/mcp-conformance-setup)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI is set: a missing SDK is a failure", pytrace=False)
        pytest.skip(message)
    return directory / "node_modules"


async def test_the_typescript_sdks_websocket_client_transport() -> None:
    modules = _node_modules()
    async with serving(mcp_ws_app(make_agent(Probe()))) as base:
        node = await asyncio.create_subprocess_exec(
            str(modules / ".bin" / "node"),
            str(TS_CLIENT),
            str(modules),
            _ws(base),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(node.communicate(), 120)
    assert node.returncode == 0, err.decode()
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert seen["server"] == "helper"
    assert seen["tools"] == ["add", "ask_helper", "explode", "wait"]
    assert seen["added"]["content"] == [{"type": "text", "text": "42"}]
    assert seen["added"]["structuredContent"] == {"result": 42}
    assert seen["exploded"]["isError"] is True


async def test_a_server_that_goes_away_is_an_error_not_a_hang() -> None:
    async with serving(mcp_ws_app(make_agent(Probe()))) as base:
        client = MCPClient.websocket(_ws(base), call_timeout=20)
        await client.connect()
        assert (await client.call_tool("add", {"a": 1, "b": 2})).content == "3"
    try:
        with pytest.raises(MCPError):
            await asyncio.wait_for(client.call_tool("add", {"a": 1, "b": 2}), 60)
    finally:
        await client.aclose()
