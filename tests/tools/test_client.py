"""A tool's caller, through its RunContext: the same tool with a client, and with none."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.core.errors import NoClientError, ToolError
from daimon.models import FunctionModel
from daimon.tools import Elicitation, RunClient, RunContext
from daimon.tools._client import current_client


class RecordingClient:
    """A RunClient that keeps what it was sent and answers from a script."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    async def log(self, level: str, data: Any, logger: str | None) -> None:
        self.sent.append(("log", level, data, logger))

    async def report_progress(
        self, progress: float, total: float | None, message: str | None
    ) -> None:
        self.sent.append(("progress", progress, total, message))

    async def sample(
        self, prompt: str, *, system: str | None, max_tokens: int, temperature: float | None
    ) -> str:
        self.sent.append(("sample", prompt, system, max_tokens, temperature))
        return "sampled"

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Elicitation:
        self.sent.append(("elicit", message, dict(schema)))
        return Elicitation("accept", {"name": "Ada"})


async def test_with_no_client_logs_go_to_python_logging_and_progress_nowhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = RunContext(run_id="r").for_call("c1", "fetch")
    with caplog.at_level(logging.DEBUG, logger="daimon.tools"):
        await ctx.log("warning", "slow answer")
        await ctx.log("debug", {"n": 1}, logger="http")
        await ctx.report_progress(1, 2, "half")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("daimon.tools", logging.WARNING, "fetch: slow answer"),
        ("daimon.tools.http", logging.DEBUG, "fetch: {'n': 1}"),
    ]


async def test_with_no_client_sampling_and_elicitation_raise_a_clear_error() -> None:
    ctx = RunContext(run_id="r").for_call("c1", "ask")
    with pytest.raises(NoClientError, match="cannot ask the caller for sampling") as raised:
        await ctx.sample("hello")
    assert isinstance(raised.value, ToolError) and raised.value.what == "sampling"
    with pytest.raises(NoClientError, match="not called by an MCP client"):
        await ctx.elicit("name?", {"type": "object", "properties": {}})


async def test_a_client_given_to_the_context_gets_everything() -> None:
    client = RecordingClient()
    assert isinstance(client, RunClient)
    run = RunContext(run_id="r", client=client)
    ctx = run.for_call("c1", "t")
    assert ctx.client is client  # a call's view reads the run's client
    await ctx.log("info", "hi", logger="x")
    await ctx.report_progress(3, None)
    assert await ctx.sample("p", system="s", max_tokens=9, temperature=0.5) == "sampled"
    answer = await ctx.elicit("who?", {"type": "object"})
    assert answer.accepted and answer.content == {"name": "Ada"}
    assert client.sent == [
        ("log", "info", "hi", "x"),
        ("progress", 3, None, None),
        ("sample", "p", "s", 9, 0.5),
        ("elicit", "who?", {"type": "object"}),
    ]


async def test_an_agent_runs_tools_reach_the_client_of_the_call_that_started_it() -> None:
    client = RecordingClient()

    @tool
    async def step(ctx: RunContext[Any]) -> str:
        """Reports progress."""
        await ctx.report_progress(1, 1, "done")
        return "stepped"

    def model(request: ChatRequest) -> ChatResponse:
        if not any(m.role is Role.TOOL for m in request.messages):
            return ChatResponse.tool_use(ToolCall(id="1", name="step", arguments={}))
        return ChatResponse.reply("ok")

    agent = Agent(FunctionModel(model), tools=[step])
    token = current_client.set(client)
    try:
        assert (await agent.prompt("go")).text == "ok"
    finally:
        current_client.reset(token)
    assert client.sent == [("progress", 1, 1, "done")]
    # and with no client set, the same agent runs as before
    assert (await agent.prompt("go")).text == "ok"
    assert len(client.sent) == 1


def test_elicitation_is_a_plain_value() -> None:
    assert not Elicitation("decline").accepted
    assert Elicitation("cancel").content is None
