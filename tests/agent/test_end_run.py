"""Tools that end the run, and usage reported by nested agents."""

from __future__ import annotations

import asyncio

from daimon import (
    Agent,
    ChatResponse,
    EndRun,
    ModelPrice,
    PriceTable,
    RunContext,
    ToolCall,
    ToolResult,
    Usage,
    tool,
)
from daimon.models import ScriptedModel


async def test_end_run_finishes_with_the_tools_result_and_cancels_siblings() -> None:
    finished: list[str] = []

    @tool
    async def transfer(to: str) -> str:
        """Hand over."""
        raise EndRun({"handoff": to}, text=f"transferring to {to}")

    @tool
    async def slow() -> str:
        """Slow."""
        await asyncio.sleep(5)
        finished.append("slow")
        return "x"

    turn = ChatResponse.tool_use(
        ToolCall(id="s", name="slow", arguments={}),
        ToolCall(id="t", name="transfer", arguments={"to": "billing"}),
    )
    model = ScriptedModel([turn])
    events = [e async for e in Agent(model, tools=[slow, transfer]).prompt_stream("help")]
    response = events[-1].response  # type: ignore[union-attr]
    assert response is not None
    assert response.output == {"handoff": "billing"}
    assert response.text == "transferring to billing"
    assert [(m.tool_call_id, m.text) for m in response.messages[2:]] == [
        ("s", "Not run: the run ended."),
        ("t", "transferring to billing"),
    ]
    assert finished == []
    assert [e.call_id for e in events if isinstance(e, ToolResult)] == ["t"]


async def test_usage_and_cost_of_a_sub_agent_roll_up_into_the_parent() -> None:
    prices = PriceTable({"m": ModelPrice(input=1_000_000.0, output=1_000_000.0)}, as_of="test")
    child = Agent(
        ScriptedModel(
            [ChatResponse.reply("42", usage=Usage(input_tokens=5, output_tokens=5), model="m")]
        ),
        cost_model=prices,
    )

    @tool
    async def ask_expert(ctx: RunContext[None], question: str) -> str:
        """Ask the expert agent."""
        answer = await child.prompt(question, cancel=ctx.cancel)
        ctx.report_usage(answer.usage, answer.cost)
        return answer.text

    parent_turns = [
        ChatResponse.tool_use(
            ToolCall(id="1", name="ask_expert", arguments={"question": "?"}),
            usage=Usage(input_tokens=1, output_tokens=1),
            model="m",
        ),
        ChatResponse.reply("done", usage=Usage(input_tokens=1, output_tokens=1), model="m"),
    ]
    parent = Agent(ScriptedModel(parent_turns), tools=[ask_expert], cost_model=prices)
    response = await parent.prompt("q")
    assert response.usage == Usage(input_tokens=7, output_tokens=7)
    assert response.cost == 14.0
