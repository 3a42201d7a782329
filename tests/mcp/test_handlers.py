"""MCPClient answering the official SDK's server: sampling, elicitation, logs and progress."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from daimon import ChatRequest, ChatResponse, Role
from daimon.core.errors import BuilderError, MCPError
from daimon.mcp import MCPClient
from daimon.models import FunctionModel
from daimon.tools import Elicitation, RunContext

from .conftest import SDK_SERVER, load, serving


def _model(seen: list[ChatRequest]) -> FunctionModel:
    def answer(request: ChatRequest) -> ChatResponse:
        seen.append(request)
        return ChatResponse.reply("forty-two")

    return FunctionModel(answer)


async def test_sampling_is_answered_by_a_daimon_model() -> None:
    seen: list[ChatRequest] = []
    server = load(SDK_SERVER).build()
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol="legacy", sampling_model=_model(seen)) as client,
    ):
        output = await client.call_tool("ask_model", {"question": "what is six times seven?"})
        assert not output.is_error, output.content
        assert output.content.endswith(": forty-two")
        (request,) = seen
        assert [(m.role, m.text) for m in request.messages] == [
            (Role.SYSTEM, "answer briefly"),
            (Role.USER, "what is six times seven?"),
        ]
        assert request.max_tokens == 20


async def test_without_a_sampling_model_the_server_is_refused() -> None:
    server = load(SDK_SERVER).build()
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol="legacy") as client,
    ):
        # the SDK's server turns its failed request into the call's JSON-RPC error
        with pytest.raises(MCPError, match="Sampling not supported"):
            await client.call_tool("ask_model", {"question": "hi"})
        assert (await client.call_tool("add", {"a": 1, "b": 2})).content == "3"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (Elicitation("accept", {"name": "Ada", "age": 36}), "accept {'name': 'Ada', 'age': 36}"),
        ({"name": "Grace"}, "accept {'name': 'Grace', 'age': 30}"),  # the default fills in
        (Elicitation("decline"), "decline None"),
    ],
)
async def test_elicitation_is_answered_by_the_users_callback(answer: Any, expected: str) -> None:
    asked: list[tuple[str, Mapping[str, Any]]] = []

    async def on_elicit(message: str, schema: Mapping[str, Any]) -> Any:
        asked.append((message, schema))
        return answer

    server = load(SDK_SERVER).build()
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol="legacy", on_elicit=on_elicit) as client,
    ):
        output = await client.call_tool("ask_user", {})
        assert output.content == expected
        ((message, schema),) = asked
        assert message == "Your profile?"
        assert schema["properties"]["age"]["default"] == 30


async def test_an_elicitation_handler_that_raises_fails_the_servers_request_only() -> None:
    def on_elicit(message: str, schema: Mapping[str, Any]) -> Elicitation:
        raise RuntimeError("no terminal")

    server = load(SDK_SERVER).build()
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol="legacy", on_elicit=on_elicit) as client,
    ):
        with pytest.raises(MCPError, match="elicitation handler failed: RuntimeError: no term"):
            await client.call_tool("ask_user", {})
        assert (await client.call_tool("add", {"a": 1, "b": 2})).content == "3"


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_log_messages_and_progress_are_delivered(protocol: str) -> None:
    logs: list[tuple[str, Any, str | None]] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    server = load(SDK_SERVER).build()
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(
            f"{base}/mcp",
            protocol=protocol,
            on_log=lambda level, data, logger: logs.append((level, data, logger)),
            log_level="info",
        ) as client,
    ):
        output = await client.call_tool("talk", {}, on_progress=on_progress)
        assert output.content == "talked"
        assert logs == [("info", "starting", "talk")]  # debug is below the level asked for
        assert progress == [(1, 2, "half"), (2, 2, "all")]


async def test_without_a_log_handler_server_logs_go_to_python_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = load(SDK_SERVER).build()
    with caplog.at_level(logging.DEBUG, logger="daimon.mcp.server"):
        async with (
            serving(server.streamable_http_app()) as base,
            MCPClient.http(f"{base}/mcp", protocol="legacy", name="sdk") as client,
        ):
            await client.call_tool("talk", {})
    messages = [r.getMessage() for r in caplog.records if r.name == "daimon.mcp.server"]
    assert messages == ["MCP server 'sdk': starting", "MCP server 'sdk': {'detail': 1}"]


async def test_a_remote_tools_progress_goes_on_to_the_runs_own_caller() -> None:
    relayed: list[tuple[float, float | None, str | None]] = []

    class Caller:
        async def log(self, level: str, data: Any, logger: str | None) -> None:
            pass

        async def report_progress(
            self, progress: float, total: float | None, message: str | None
        ) -> None:
            relayed.append((progress, total, message))

        async def sample(self, prompt: str, **options: Any) -> str:
            raise AssertionError("not asked")

        async def elicit(self, message: str, schema: Mapping[str, Any]) -> Elicitation:
            raise AssertionError("not asked")

    server = load(SDK_SERVER).build()
    async with (
        serving(server.streamable_http_app()) as base,
        MCPClient.http(f"{base}/mcp", protocol="legacy") as client,
    ):
        (talk,) = [t for t in await client.tools() if t.name == "talk"]
        ctx = RunContext(run_id="r", client=Caller()).for_call("c", "talk")
        assert (await talk.execute({}, ctx)).content == "talked"
        assert relayed == [(1, 2, "half"), (2, 2, "all")]


def test_a_log_level_must_be_one_of_the_protocols() -> None:
    with pytest.raises(BuilderError, match="log_level must be one of"):
        MCPClient.http("http://127.0.0.1:1/mcp", log_level="loud")
