"""A served tool talking to the official SDK's client through its RunContext.

Log messages (and ``logging/setLevel``), progress, sampling and elicitation, over streamable
HTTP, against ``mcp.Client`` with its own callbacks; and the same tools where no client can
answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types
import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.mcp import MCPServer, mcp_http_app
from daimon.models import FunctionModel
from daimon.tools import RunContext
from mcp import Client

from .conftest import serving

FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "Ada"},
        "age": {"type": "integer"},
    },
    "required": ["age"],
}


@tool
async def chatty(ctx: RunContext[Any]) -> str:
    """Logs at three levels, then reports progress in three steps."""
    await ctx.log("debug", "looking around")
    await ctx.log("info", {"step": "started"}, logger="chatty")
    await ctx.log("error", "something odd")
    for done in (1, 2, 3):
        await ctx.report_progress(done, 3, f"step {done}")
    return "done"


@tool
async def poet(topic: str, ctx: RunContext[Any]) -> str:
    """Asks the client's model for a poem."""
    return await ctx.sample(f"a poem about {topic}", system="be brief", max_tokens=50)


@tool
async def survey(ctx: RunContext[Any]) -> str:
    """Asks the client's user for a name and an age."""
    answer = await ctx.elicit("Who are you?", FORM)
    return f"{answer.action}: {dict(answer.content or {})}"


def _server(*extra: Any) -> MCPServer:
    return MCPServer([chatty, poet, survey, *extra], name="talker")


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


# the SDK's client warns on logging/setLevel: deprecated by the 2026-07-28 protocol
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_log_messages_and_progress_reach_the_sdk_client() -> None:
    logs: list[mcp_types.LoggingMessageNotificationParams] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with (
        serving(mcp_http_app(_server())) as base,
        Client(f"{base}/mcp", mode="legacy", logging_callback=on_log) as client,
    ):
        assert client.server_capabilities.logging is not None
        result = await client.call_tool("chatty", {}, progress_callback=on_progress)
        assert _text(result) == "done"
        assert [(m.level, m.data, m.logger) for m in logs] == [
            ("debug", "looking around", None),
            ("info", {"step": "started"}, "chatty"),
            ("error", "something odd", None),
        ]
        assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]

        # logging/setLevel: only messages at or above the level the client set
        logs.clear()
        await client.set_logging_level("warning")
        await client.call_tool("chatty", {})
        assert [m.level for m in logs] == ["error"]


async def test_sampling_is_answered_by_the_sdk_clients_model() -> None:
    asked: list[mcp_types.CreateMessageRequestParams] = []

    async def sample(context: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
        asked.append(params)
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text="Roses are red."),
            model="client-model",
        )

    async with (
        serving(mcp_http_app(_server())) as base,
        Client(f"{base}/mcp", mode="legacy", sampling_callback=sample) as client,
    ):
        result = await client.call_tool("poet", {"topic": "roses"})
        assert (_text(result), result.is_error) == ("Roses are red.", False)
        (params,) = asked
        assert (params.system_prompt, params.max_tokens) == ("be brief", 50)
        assert params.messages[0].content.text == "a poem about roses"  # type: ignore[union-attr]


async def test_elicitation_is_answered_by_the_sdk_clients_user() -> None:
    answers = iter(
        [
            mcp_types.ElicitResult(action="accept", content={"name": "Grace", "age": 85}),
            mcp_types.ElicitResult(action="decline"),
        ]
    )
    schemas: list[dict[str, Any]] = []

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        schemas.append(params.requested_schema)
        return next(answers)

    async with (
        serving(mcp_http_app(_server())) as base,
        Client(f"{base}/mcp", mode="legacy", elicitation_callback=elicit) as client,
    ):
        accepted = await client.call_tool("survey", {})
        assert _text(accepted) == "accept: {'name': 'Grace', 'age': 85}"
        declined = await client.call_tool("survey", {})
        assert _text(declined) == "decline: {}"
        assert schemas[0] == FORM


async def test_a_client_without_sampling_or_elicitation_gets_a_clear_tool_error() -> None:
    async with (
        serving(mcp_http_app(_server())) as base,
        Client(f"{base}/mcp", mode="legacy") as client,
    ):
        for name, arguments in (("poet", {"topic": "x"}), ("survey", {})):
            result = await client.call_tool(name, arguments)
            assert result.is_error
            assert "NoClientError" in _text(result)
            assert "does not offer" in _text(result)


async def test_the_tools_of_an_agent_run_started_by_a_call_reach_the_same_client() -> None:
    logs: list[Any] = []

    @tool
    async def note(text: str, ctx: RunContext[Any]) -> str:
        """Logs the text."""
        await ctx.log("info", text)
        return "noted"

    def model(request: ChatRequest) -> ChatResponse:
        if not any(m.role is Role.TOOL for m in request.messages):
            return ChatResponse.tool_use(ToolCall(id="1", name="note", arguments={"text": "hi"}))
        return ChatResponse.reply("I noted it.")

    agent = Agent(FunctionModel(model), name="scribe", tools=[note])

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async with (
        serving(mcp_http_app(agent)) as base,
        Client(f"{base}/mcp", mode="legacy", logging_callback=on_log) as client,
    ):
        result = await client.call_tool("ask_scribe", {"prompt": "note hi"})
        assert _text(result) == "I noted it."
        assert logs == ["hi"]


async def test_on_2026_connections_logs_need_the_requests_opt_in() -> None:
    logs: list[str] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(params.level)

    async with serving(mcp_http_app(_server())) as base:
        async with Client(f"{base}/mcp", logging_callback=on_log) as client:
            assert client.protocol_version == "2026-07-28"
            await client.call_tool("chatty", {})
        assert logs == []  # no opt-in: the server must not send
        async with Client(f"{base}/mcp", logging_callback=on_log, log_level="info") as client:
            await client.call_tool("chatty", {})
        assert logs == ["info", "error"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_progress_without_a_token_and_a_cancelled_call_leave_the_server_serving(
    mode: str,
) -> None:
    started = asyncio.Event()

    @tool
    async def slow(ctx: RunContext[Any]) -> str:
        """Reports progress, then waits long."""
        await ctx.report_progress(0, None)  # no progress token: nothing is sent
        started.set()
        await asyncio.sleep(60)
        return "never"

    async with (
        serving(mcp_http_app(_server(slow))) as base,
        Client(f"{base}/mcp", mode=mode) as client,
    ):
        async with asyncio.timeout(30):
            call = asyncio.create_task(client.call_tool("slow", {}))
            await started.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        assert _text(await client.call_tool("chatty", {})) == "done"


async def test_on_2026_connections_sampling_and_elicitation_are_a_clear_tool_error() -> None:
    # 2026-07-28 asks the client through an input-required result and a retried call (MRTR),
    # which daimon's server does not do yet: the tool reads why it cannot ask.
    async def sample(context: Any, params: Any) -> Any:
        raise AssertionError("never asked")

    async with (
        serving(mcp_http_app(_server())) as base,
        Client(f"{base}/mcp", sampling_callback=sample, elicitation_callback=sample) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        for name, arguments in (("poet", {"topic": "x"}), ("survey", {})):
            result = await client.call_tool(name, arguments)
            assert result.is_error and "no back-channel" in _text(result), _text(result)
