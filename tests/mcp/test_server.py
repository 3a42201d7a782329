"""The official SDK's client against daimon's MCP server, and the server's defences."""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import subprocess
import sys
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.core.errors import BuilderError
from daimon.mcp import create_mcp_server, mcp_http_app, serve_mcp
from daimon.models import FunctionModel
from daimon.multiagent import HandoffNetwork, Supervisor
from daimon.orchestration import Workflow, WorkflowBuilder, workflow_node
from mcp import Client, StdioServerParameters

from .conftest import EXAMPLE_SERVER, PYTHON, Probe, make_agent, serving

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
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


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


async def _legacy_session(http: httpx.AsyncClient, url: str, **headers: str) -> dict[str, str]:
    """Initialize a 2025-11-25 session by hand; the headers its later requests need."""
    opened = await http.post(url, json=INITIALIZE, headers={**ACCEPT, **headers})
    assert opened.status_code == 200, opened.text
    session = {
        **ACCEPT,
        **headers,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(url, json=initialized, headers=session)).status_code == 202
    return session


# ------------------------------------------------------------------------------ stdio


async def test_the_sdk_client_over_stdio() -> None:
    params = StdioServerParameters(command=PYTHON, args=[str(EXAMPLE_SERVER)])
    async with Client(params) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(listed) == ["add", "ask_calculator", "divide"]
        assert listed["add"].input_schema["required"] == ["a", "b"]

        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert (_text(added), added.is_error) == ("5", False)
        raised = await client.call_tool("divide", {"a": 1, "b": 0})
        assert raised.is_error and "ZeroDivisionError" in _text(raised)
        invalid = await client.call_tool("add", {"a": "two"})
        assert invalid.is_error and "invalid arguments" in _text(invalid)
        unknown = await client.call_tool("subtract", {})
        assert unknown.is_error and "not found" in _text(unknown)
        asked = await client.call_tool("ask_calculator", {"prompt": "add 2 and 40"})
        assert _text(asked) == "The sum is 42.0."


def test_stdio_answers_malformed_lines_keeps_serving_and_exits_when_stdin_closes() -> None:
    with subprocess.Popen(
        [sys.executable, str(EXAMPLE_SERVER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as server:
        assert server.stdin is not None and server.stdout is not None

        def ask(line: bytes) -> dict[str, Any]:
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write(line + b"\n")
            server.stdin.flush()
            reply: dict[str, Any] = json.loads(server.stdout.readline())
            return reply

        assert ask(b"{not json")["error"]["code"] == -32700
        assert ask(b'{"hello": "world"}')["error"]["code"] == -32600
        assert ask(b"\xff\xfe")["error"]["code"] == -32700
        assert ask(json.dumps(INITIALIZE).encode())["result"]["serverInfo"]["name"] == "calculator"

        server.stdin.close()  # the client went away: the server must not linger
        assert server.wait(timeout=10) == 0


# ------------------------------------------------------------------------------ HTTP


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_the_sdk_client_over_streamable_http(protocol: str) -> None:
    app = mcp_http_app(make_agent(Probe()))
    async with serving(app) as base, Client(f"{base}/mcp", mode=protocol) as client:
        assert client.protocol_version == ("2025-11-25" if protocol == "legacy" else "2026-07-28")
        names = sorted(t.name for t in (await client.list_tools()).tools)
        # a tool that needs a person's approval is never served
        assert names == ["add", "ask_helper", "explode", "wait"]
        assert _text(await client.call_tool("add", {"a": 1, "b": 2})) == "3"
        exploded = await client.call_tool("explode", {})
        assert exploded.is_error
        assert _text(exploded) == "Error: RuntimeError: exploded on purpose"
        asked = await client.call_tool("ask_helper", {"prompt": "what is 40 + 2?"})
        assert (_text(asked), asked.is_error) == ("the answer is 42", False)


async def test_a_client_disconnect_does_not_cancel_a_running_tool() -> None:
    probe = Probe()
    async with serving(mcp_http_app(make_agent(probe))) as base:
        url = f"{base}/mcp"
        async with httpx.AsyncClient() as http:
            session = await _legacy_session(http, url)
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "wait", "arguments": {"seconds": 0.5}},
        }
        async with httpx.AsyncClient() as http:
            request = asyncio.create_task(http.post(url, json=call, headers=session))
            await asyncio.wait_for(probe.started.wait(), 10)
            request.cancel()  # drop the connection mid-call
            with pytest.raises(asyncio.CancelledError):
                await request
        await asyncio.wait_for(probe.finished.wait(), 10)
        assert not probe.cancelled.is_set()


async def test_notifications_cancelled_cancels_a_running_tool() -> None:
    probe = Probe()
    async with (
        serving(mcp_http_app(make_agent(probe))) as base,
        Client(f"{base}/mcp", mode="legacy") as client,
    ):
        with anyio.move_on_after(0.3):  # the SDK then sends notifications/cancelled
            await client.call_tool("wait", {"seconds": 30})
        await asyncio.wait_for(probe.cancelled.wait(), 10)
        assert probe.context is not None and probe.context.cancel.cancelled  # its token too
        assert _text(await client.call_tool("add", {"a": 1, "b": 1})) == "2"  # still serving


async def test_on_2026_connections_closing_the_stream_is_the_cancellation() -> None:
    # The 2026-07-28 specification makes a dropped response stream the cancel signal over HTTP.
    probe = Probe()
    async with serving(mcp_http_app(make_agent(probe))) as base:
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        }
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "wait", "arguments": {"seconds": 30}, "_meta": meta},
        }
        headers = {
            **ACCEPT,
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "wait",
        }
        async with httpx.AsyncClient() as http:
            request = asyncio.create_task(http.post(f"{base}/mcp", json=call, headers=headers))
            await asyncio.wait_for(probe.started.wait(), 10)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
        await asyncio.wait_for(probe.cancelled.wait(), 10)


async def test_malformed_json_rpc_gets_an_error_and_the_server_keeps_serving() -> None:
    async with serving(mcp_http_app(make_agent(Probe()))) as base, httpx.AsyncClient() as http:
        url = f"{base}/mcp"
        session = await _legacy_session(http, url)
        for body, code in [(b"{not json", -32700), (b'{"jsonrpc": "2.0"}', -32602)]:
            for headers in (ACCEPT, session):
                answer = await http.post(url, content=body, headers=headers)
                assert answer.status_code == 400
                assert answer.json()["error"]["code"] == code
        listed = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
        assert (await http.post(url, json=listed, headers=session)).status_code == 200
        assert (await _legacy_session(http, url))["mcp-session-id"]


async def test_host_and_origin_are_checked_against_dns_rebinding() -> None:
    async with serving(mcp_http_app(make_agent(Probe()))) as base, httpx.AsyncClient() as http:
        url = f"{base}/mcp"
        port = base.rsplit(":", 1)[1]
        for bad in (
            {"host": "attacker.example"},
            {"host": f"attacker.example:{port}"},
            {"origin": "http://attacker.example"},
            {"origin": f"http://attacker.example:{port}"},
            {"origin": "null"},
            # Another origin than the Host the request names, even on loopback (another local
            # page): allowed only when listed.
            {"origin": f"http://localhost:{port}"},
            {"origin": "http://127.0.0.1:1"},
        ):
            answer = await http.post(url, json=INITIALIZE, headers={**ACCEPT, **bad})
            assert answer.status_code == 403, bad
            assert answer.text.startswith("Forbidden: ")
        for good in (
            {},
            {"host": f"localhost:{port}"},
            {"host": f"localhost:{port}", "origin": f"http://localhost:{port}"},
            {"origin": f"http://127.0.0.1:{port}"},
        ):
            answer = await http.post(url, json=INITIALIZE, headers={**ACCEPT, **good})
            assert answer.status_code == 200, good


async def test_a_bearer_token_is_required_on_every_request_when_set() -> None:
    agent = make_agent(Probe())
    async with (
        serving(mcp_http_app(agent, token="s3cret-token")) as base,
        httpx.AsyncClient() as http,
    ):
        url = f"{base}/mcp"
        for auth in (
            {},
            {"authorization": "Bearer wrong"},
            {"authorization": "Basic s3cret-token"},
        ):
            answer = await http.post(url, json=INITIALIZE, headers={**ACCEPT, **auth})
            assert answer.status_code == 401, auth
            assert answer.headers["www-authenticate"].startswith("Bearer")
        session = await _legacy_session(http, url, authorization="Bearer s3cret-token")
        listed = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
        assert (await http.post(url, json=listed, headers=session)).status_code == 200
        # a session id is not a credential
        del session["authorization"]
        assert (await http.post(url, json=listed, headers=session)).status_code == 401

    # the SDK client, sending the token, end to end
    async with (
        serving(mcp_http_app(agent, token="s3cret-token")) as base,
        httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-token"}) as http2,
        Client(streamable_http_client(f"{base}/mcp", http_client=http2)) as client,
    ):
        assert _text(await client.call_tool("add", {"a": 2, "b": 2})) == "4"


def test_it_refuses_to_serve_off_loopback_without_a_token() -> None:
    agent = make_agent(Probe())
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        with pytest.raises(BuilderError, match="without authentication"):
            mcp_http_app(agent, host=host)
        assert mcp_http_app(agent, host=host, token="t0ken") is not None
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert mcp_http_app(agent, host=host) is not None
    with pytest.raises(BuilderError, match="empty"):
        mcp_http_app(agent, token="")
    assert inspect.signature(serve_mcp).parameters["host"].default == "127.0.0.1"


async def test_serve_mcp_refuses_before_binding_and_serves_loopback_by_default() -> None:
    agent = make_agent(Probe())
    with pytest.raises(BuilderError, match="without authentication"):
        await serve_mcp(agent, transport="http", host="0.0.0.0", port=_free_port())
    with pytest.raises(BuilderError, match="transport"):
        await serve_mcp(agent, transport="carrier-pigeon")  # type: ignore[arg-type]

    port = _free_port()
    server = asyncio.create_task(serve_mcp(agent, transport="http", port=port))
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(200):
            try:
                async with Client(url) as client:
                    assert _text(await client.call_tool("add", {"a": 1, "b": 2})) == "3"
                break
            except Exception:
                await asyncio.sleep(0.05)
        else:
            pytest.fail("serve_mcp never answered")
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server


def test_the_server_object_is_the_sdks() -> None:
    from mcp.server.lowlevel import Server

    server = create_mcp_server(make_agent(Probe()), expose_agent=False, name="tools-only")
    assert isinstance(server, Server) and server.name == "tools-only"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ------------------------------------------------------------------------------ promptables


def _lead(helper: Agent) -> Supervisor:
    """Delegates the prompt to ``helper``, then answers ``lead: <its answer>``."""

    def model(request: ChatRequest) -> ChatResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return ChatResponse.reply(f"lead: {last.text}")
        task = {"agent": "helper", "task": last.text}
        return ChatResponse.tool_use(ToolCall(id="d1", name="delegate", arguments=task))

    return Supervisor(FunctionModel(model), {"helper": helper}, name="lead")


def _pausing(name: str = "deleter") -> Agent:
    """Calls ``delete_everything``, which needs a person's approval: its runs pause."""

    @tool(requires_approval=True)
    def delete_everything() -> str:
        """Needs a person's approval."""
        return "deleted"

    call = ToolCall(id="x1", name="delete_everything", arguments={})
    model = FunctionModel(lambda request: ChatResponse.tool_use(call))
    return Agent(model, name=name, tools=[delete_everything])


def _shout() -> Workflow:
    @workflow_node(output="loud")
    def shout(text: str) -> str:
        return text.upper() + "!"

    return WorkflowBuilder("shout", inputs={"text": str}).add(shout).build()


async def test_a_supervisor_and_a_workflow_are_served_as_ask_tools() -> None:
    lead = _lead(make_agent(Probe()))
    async with serving(mcp_http_app(lead)) as base, Client(f"{base}/mcp") as client:
        # A team offers itself only: its own agent's delegate tool is not for remote callers.
        assert [t.name for t in (await client.list_tools()).tools] == ["ask_lead"]
        asked = await client.call_tool("ask_lead", {"prompt": "what is 40 + 2?"})
        assert (_text(asked), asked.is_error) == ("lead: the answer is 42", False)
    async with serving(mcp_http_app(_shout())) as base, Client(f"{base}/mcp") as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["ask_shout"]
        shouted = await client.call_tool("ask_shout", {"prompt": "hey"})
        assert (_text(shouted), shouted.is_error) == ("HEY!", False)


async def test_a_paused_run_is_an_error_result_naming_the_tool_waiting() -> None:
    async with (
        serving(mcp_http_app(_pausing())) as base,
        Client(f"{base}/mcp") as client,
    ):
        paused = await client.call_tool("ask_deleter", {"prompt": "clean up"})
        assert paused.is_error
        assert _text(paused) == (
            "Error: the run paused: delete_everything need(s) a person's approval, which an MCP "
            "tool call cannot ask for; those calls did not run"
        )
    # A network cannot pause: its agent's pause raises, and is answered the same way.
    network = HandoffNetwork({"deleter": _pausing()}, start="deleter", name="desk")
    async with serving(mcp_http_app(network)) as base, Client(f"{base}/mcp") as client:
        raised = await client.call_tool("ask_desk", {"prompt": "clean up"})
        assert raised.is_error
        assert _text(raised).startswith(
            "Error: the run paused: delete_everything need(s) a person's approval, which agent "
            "'deleter' of a HandoffNetwork cannot ask for"
        )
