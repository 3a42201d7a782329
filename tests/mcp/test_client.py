"""daimon's MCP client against servers written with the official SDK, over real transports."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest

from daimon import Agent, ChatRequest, ChatResponse, MCPError, Role, ToolCall
from daimon.core.errors import BuilderError
from daimon.mcp import MCPClient, MCPResourceTemplate, MCPRoot, MCPTool, mcp_http_app
from daimon.models import FunctionModel
from daimon.tools import RunContext

from .conftest import (
    MINIMAL_SERVER,
    PYTHON,
    SDK_SERVER,
    Probe,
    load,
    make_agent,
    pids_in,
    serving,
)


@pytest.fixture
def quiet() -> Iterator[TextIO]:
    """Where a chatty server's stderr goes."""
    with open(os.devnull, "w") as devnull:
        yield devnull


def _ctx() -> RunContext[None]:
    return RunContext(run_id="r", deps=None)


def _by_name(tools: list[MCPTool]) -> dict[str, MCPTool]:
    return {t.name: t for t in tools}


async def _wait_for(condition: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_stdio_against_the_sdk_server(quiet: TextIO) -> None:
    changes: list[list[str]] = []
    client = MCPClient.stdio(
        PYTHON,
        [str(SDK_SERVER)],
        stderr=quiet,
        connect_timeout=30,
        on_tools_changed=lambda tools: changes.append(sorted(t.name for t in tools)),
    )
    async with client:
        assert client.connected and client.protocol_version == "2026-07-28"
        tools = _by_name(await client.tools())
        assert sorted(tools) == [
            "add",
            "ask_model",
            "ask_user",
            "boom",
            "get_weather",
            "install",
            "roots",
            "slow",
            "talk",
            "uninstall",
        ]
        assert tools["add"].parameters_schema["required"] == ["a", "b"]
        assert tools["add"].description == "Add two integers."

        added = await tools["add"].execute({"a": 2, "b": 3}, _ctx())
        assert (added.content, added.is_error) == ("5", False)
        weather = await tools["get_weather"].execute({"city": "Oslo"}, _ctx())
        assert (
            weather.content == "sunny in Oslo" and tools["get_weather"].remote_name == "get.weather"
        )

        failed = await tools["boom"].execute({}, _ctx())
        assert failed.is_error and "boom" in failed.content

        # tools/list_changed on a 2026-07-28 connection arrives on subscriptions/listen
        await tools["install"].execute({}, _ctx())
        await _wait_for(lambda: changes)
        assert "double" in changes[-1]
        assert "double" in _by_name(await client.tools())

        resources = {r.uri: r for r in await client.list_resources()}
        assert resources["mem://greeting"].description == "A greeting."
        (greeting,) = await client.read_resource("mem://greeting")
        assert greeting.text == "hello from the server"
        (blob,) = await client.read_resource("mem://blob")
        assert blob.data == b"\x00\x01\x02"
        with pytest.raises(MCPError):
            await client.read_resource("mem://missing")

        (prompt,) = await client.list_prompts()
        assert prompt.name == "explain" and prompt.arguments[0].required
        (message,) = await client.get_prompt("explain", {"topic": "MCP"})
        assert (message.role, message.text) == (Role.USER, "Explain MCP simply.")
    assert not client.connected


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_streamable_http_against_the_sdk_server(protocol: str) -> None:
    server = load(SDK_SERVER).build()
    changes: list[list[str]] = []
    async with serving(server.streamable_http_app()) as base:
        client = MCPClient.http(
            f"{base}/mcp",
            protocol=protocol,
            on_tools_changed=lambda tools: changes.append([t.name for t in tools]),
        )
        async with client:
            expected = "2025-11-25" if protocol == "legacy" else "2026-07-28"
            assert client.protocol_version == expected
            assert (await client.call_tool("add", {"a": 1, "b": 1})).content == "2"
            assert (await client.call_tool("boom", {})).is_error
            await client.call_tool("install", {})
            await _wait_for(lambda: changes)
            assert "double" in changes[-1]
            assert (await client.call_tool("double", {"x": 21})).content == "42"
            await client.call_tool("uninstall", {})  # a second change is seen too
            await _wait_for(lambda: len(changes) == 2)
            assert "double" not in changes[-1]
            assert "double" not in {t.name for t in await client.tools()}


async def test_a_call_that_takes_too_long_times_out_and_is_cancelled_on_the_server() -> None:
    slow_cancelled = asyncio.Event()
    server = load(SDK_SERVER).build(slow_cancelled)
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol="legacy", call_timeout=0.5) as client,
    ):
        slow = _by_name(await client.tools())["slow"]
        started = time.monotonic()
        output = await slow.execute({"seconds": 30}, _ctx())
        assert output.is_error and "timed out after 0.5s" in output.content
        assert time.monotonic() - started < 5
        await asyncio.wait_for(slow_cancelled.wait(), 5)  # notifications/cancelled was sent
        assert (await client.call_tool("add", {"a": 1, "b": 1})).content == "2"


async def test_http_sse_transport_against_the_sdk_server() -> None:
    server = load(SDK_SERVER).build()
    async with serving(server.sse_app()) as base, MCPClient.sse(f"{base}/sse") as client:
        tools = _by_name(await client.tools())
        assert (await tools["add"].execute({"a": 20, "b": 22}, _ctx())).content == "42"


async def test_an_agent_runs_mcp_tools_and_reads_their_errors(tmp_path: Path) -> None:
    def model(request: ChatRequest) -> ChatResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        if not results:
            return ChatResponse.tool_use(
                ToolCall(id="1", name="min_echo", arguments={"text": "hi"}),
                ToolCall(id="2", name="min_echo", arguments={"text": 5}),  # not a string
            )
        return ChatResponse.reply(" | ".join(f"{m.is_error}:{m.text}" for m in results))

    server = MCPClient.stdio(PYTHON, ["-I", "-S", str(MINIMAL_SERVER)], tool_prefix="min_")
    async with server:
        agent = Agent(FunctionModel(model), tools=await server.tools())
        response = await agent.prompt("go")
    ok, invalid = response.text.split(" | ")
    assert ok == "False:hi"
    assert invalid.startswith("True:Error: invalid arguments for tool 'min_echo'")


async def test_a_lost_server_becomes_an_error_result_not_a_crash(tmp_path: Path) -> None:
    args = ["-I", "-S", str(MINIMAL_SERVER), "--pid-dir", str(tmp_path)]
    async with MCPClient.stdio(PYTHON, args) as client:
        (echo,) = await client.tools()
        (pid,) = pids_in(tmp_path)
        os.kill(pid, 9)
        output = await echo.execute({"text": "anyone?"}, _ctx())
        assert output.is_error and "Error:" in output.content


async def test_connect_gives_up_after_connect_timeout(tmp_path: Path) -> None:
    args = ["-I", "-S", str(MINIMAL_SERVER), "--hang", "--pid-dir", str(tmp_path)]
    client = MCPClient.stdio(PYTHON, args, connect_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(MCPError, match="timed out while connecting"):
        await client.connect()
    assert time.monotonic() - started < 5
    (pid,) = pids_in(tmp_path)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the hung server was stopped (and reaped)


async def test_connect_errors_are_mcp_errors() -> None:
    with pytest.raises(MCPError, match="not found"):
        await MCPClient.stdio("no-such-mcp-server-binary").connect()
    with pytest.raises(MCPError, match="could not connect"):
        await MCPClient.http("http://127.0.0.1:9/mcp", connect_timeout=5).connect()


async def test_a_closed_client_refuses_calls_and_closing_twice_is_fine() -> None:
    client = MCPClient.stdio(PYTHON, ["-I", "-S", str(MINIMAL_SERVER)])
    with pytest.raises(MCPError, match="not connected"):
        await client.tools()
    async with client:
        (echo,) = await client.tools()
    await client.aclose()
    assert (await echo.execute({"text": "x"}, _ctx())).is_error
    with pytest.raises(MCPError, match="already connected"):
        await client.connect()


def test_options_are_checked_when_the_client_is_built() -> None:
    with pytest.raises(BuilderError, match="call_timeout"):
        MCPClient.stdio("x", call_timeout=0)
    with pytest.raises(BuilderError, match="protocol"):
        MCPClient.stdio("x", protocol="2020-01-01")
    with pytest.raises(BuilderError, match="http"):
        MCPClient.http("file:///etc/passwd")


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_roots_are_answered_and_changes_announced(protocol: str, tmp_path: Path) -> None:
    changed = asyncio.Event()
    server = load(SDK_SERVER).build(roots_changed=changed)
    first = MCPRoot(uri="file:///srv/project", name="project")
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol=protocol, roots=[first, tmp_path]) as client,
    ):
        listed = (await client.call_tool("roots", {})).content
        assert listed == f"project=file:///srv/project\n{tmp_path.name}={tmp_path.as_uri()}"
        await client.set_roots(["file:///data"])
        if protocol == "legacy":  # 2026-07-28 has no such notification: servers ask each time
            await asyncio.wait_for(changed.wait(), 30)
        assert (await client.call_tool("roots", {})).content == "None=file:///data"


async def test_roots_from_a_callback_and_a_callback_that_fails() -> None:
    server = load(SDK_SERVER).build()
    answers: list[Any] = [["file:///a"], RuntimeError("disk on fire")]

    async def current() -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol="legacy", roots=current) as client,
    ):
        assert (await client.call_tool("roots", {})).content == "None=file:///a"
        with pytest.raises(MCPError, match="disk on fire"):  # the server got the error
            await client.call_tool("roots", {})
        assert (await client.call_tool("add", {"a": 1, "b": 2})).content == "3"


async def test_roots_are_checked_and_not_offered_unless_given() -> None:
    with pytest.raises(BuilderError, match="file://"):
        MCPClient.http("http://127.0.0.1:1/mcp", roots=["https://example.com/"])
    with pytest.raises(BuilderError, match="a list of roots"):
        MCPClient.http("http://127.0.0.1:1/mcp", roots="/tmp")
    server = load(SDK_SERVER).build()
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol="legacy") as client,
    ):
        with pytest.raises(MCPError, match="oots"):  # the client offered no roots capability
            await client.call_tool("roots", {})
        with pytest.raises(MCPError, match="without roots"):
            await client.set_roots(["file:///x"])


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_resource_templates_are_listed(protocol: str) -> None:
    server = load(SDK_SERVER).build()
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol=protocol) as client,
    ):
        templates = await client.list_resource_templates()
        assert templates == [
            MCPResourceTemplate(
                uri_template="mem://items/{item}",
                name="item",
                description="One item.",
                mime_type="text/plain",
            )
        ]
        [contents] = await client.read_resource("mem://items/7")
        assert contents.text == "item 7"


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_cancelling_a_call_cancels_it_on_the_server(protocol: str) -> None:
    probe = Probe()
    async with (
        serving(mcp_http_app(make_agent(probe))) as base,
        MCPClient.http(f"{base}/mcp", protocol=protocol) as client,
    ):
        call = asyncio.create_task(client.call_tool("wait", {"seconds": 60}))
        await asyncio.wait_for(probe.started.wait(), 30)
        call.cancel()
        await asyncio.wait_for(probe.cancelled.wait(), 30)  # the tool's task was cancelled
        assert probe.context is not None and probe.context.cancel.cancelled
        assert (await client.call_tool("add", {"a": 1, "b": 1})).content == "2"


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_cancelling_a_call_cancels_it_on_the_sdk_server(protocol: str) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    server = load(SDK_SERVER).build(cancelled, slow_started=started)
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol=protocol) as client,
    ):
        call = asyncio.create_task(client.call_tool("slow", {"seconds": 60}))
        await asyncio.wait_for(started.wait(), 30)
        call.cancel()
        await asyncio.wait_for(cancelled.wait(), 30)
        assert (await client.call_tool("add", {"a": 1, "b": 1})).content == "2"
