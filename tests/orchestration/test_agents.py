"""Orchestration with real daimon Agents on scripted models: usage roll-up and cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daimon import Agent, ChatRequest, ChatResponse, ModelPrice, PriceTable, Usage
from daimon.core import AgentResponse, CancelToken, RunCancelled
from daimon.models import FunctionModel, ScriptedModel
from daimon.orchestration import (
    END,
    START,
    AgentStep,
    Chain,
    DagBuilder,
    GraphBuilder,
    GraphContext,
    NodeContext,
    Promptable,
    WorkflowBuilder,
    workflow_node,
)

PRICES = PriceTable({"m": ModelPrice(input=1_000_000, output=2_000_000)}, as_of="2025-01-01")
"""$1 per input token and $2 per output token, so costs are easy to check."""


def agent(*answers: tuple[str, int, int], name: str = "agent") -> Agent:
    """An agent answering each prompt with the next (text, input tokens, output tokens)."""
    model = ScriptedModel(
        [
            ChatResponse.reply(
                text, usage=Usage(input_tokens=i, output_tokens=o, requests=1), model="m"
            )
            for text, i, o in answers
        ],
        model_name="m",
    )
    return Agent(model, name=name, cost_model=PRICES)


def test_an_agent_is_promptable() -> None:
    assert isinstance(agent(("x", 1, 1)), Promptable)


async def test_a_chain_of_agents_rolls_up_usage_and_cost() -> None:
    writer = agent(("a draft", 10, 5), name="writer")
    editor = agent(("a polished draft", 20, 8), name="editor")
    chain = Chain(
        [
            AgentStep(writer, output_key="draft"),
            AgentStep(editor, prompt_template="Polish this: {{draft}}"),
        ]
    )
    result = await chain.run("write about owls")

    assert result.value == "a polished draft"
    assert result.values == {"draft": "a draft"}
    assert result.usage == Usage(input_tokens=30, output_tokens=13, requests=2)
    assert result.cost == pytest.approx(30 * 1 + 13 * 2)
    model = editor.model
    assert isinstance(model, ScriptedModel)
    assert model.requests[0].messages[-1].text == "Polish this: a draft"
    assert [t.name for t in result.timings] == ["writer", "editor"]


async def test_graph_nodes_prompt_agents_in_parallel_and_roll_up() -> None:
    experts = {name: agent((f"{name} says yes", 3, 1), name=name) for name in ("law", "tech")}

    async def ask(ctx: GraphContext) -> dict[str, Any]:
        response = await ctx.prompt(experts[ctx.node], ctx.state["question"])
        return {ctx.node: response.text}

    graph = (
        GraphBuilder()
        .add_node("law", ask)
        .add_node("tech", ask)
        .add_edge(START, "law")
        .add_edge(START, "tech")
        .add_edge("law", END)
        .add_edge("tech", END)
        .build()
    )
    result = await graph.run({"question": "ship it?"})
    assert result.state["law"] == "law says yes" and result.state["tech"] == "tech says yes"
    assert result.usage == Usage(input_tokens=6, output_tokens=2, requests=2)
    assert result.cost == pytest.approx(10.0)


async def test_dag_nodes_returning_responses_roll_up() -> None:
    a, b = agent(("A", 1, 1)), agent(("B", 2, 2))

    async def first(inputs: dict[str, Any]) -> AgentResponse:
        return await a.prompt("go")

    async def second(inputs: dict[str, Any], ctx: NodeContext) -> str:
        return (await ctx.prompt(b, inputs["first"].text)).text

    dag = (
        DagBuilder()
        .add_node("first", first)
        .add_node("second", second, depends_on=["first"])
        .build()
    )
    result = await dag.run()
    assert result.outputs["second"] == "B"
    assert result.usage == Usage(input_tokens=3, output_tokens=3, requests=2)
    assert result.cost == pytest.approx(9.0)


async def test_workflow_nodes_roll_up() -> None:
    summarizer = agent(("short", 7, 3))

    @workflow_node(output="summary")
    async def summarize(text: str, ctx: NodeContext) -> str:
        return (await ctx.prompt(summarizer, f"Summarize: {text}")).text

    result = (
        await WorkflowBuilder(inputs={"text": str}).add(summarize).build().run({"text": "long"})
    )
    assert result["summary"] == "short"
    assert result.usage == Usage(input_tokens=7, output_tokens=3, requests=1)
    assert result.cost == pytest.approx(13.0)


async def test_the_cancel_token_reaches_a_running_agent() -> None:
    token = CancelToken()
    model_started = asyncio.Event()

    async def slow_model(request: ChatRequest) -> ChatResponse:
        model_started.set()
        await asyncio.sleep(10)
        return ChatResponse.reply("too late")

    slow = Agent(FunctionModel(slow_model))
    chain = Chain([AgentStep(slow, name="slow")])
    run = asyncio.create_task(chain.run("hello", cancel=token))
    await model_started.wait()
    token.cancel("user pressed stop")
    with pytest.raises(RunCancelled, match="user pressed stop"):
        await asyncio.wait_for(run, 2)


async def test_an_agent_caller_takes_the_agents_it_answers_for_and_leaves_the_others() -> None:
    from daimon.orchestration._common import agent_caller

    taken_agent = agent(("never asked", 1, 1), name="taken")
    left = agent(("left answers", 2, 3), name="left")
    seen: list[tuple[str, str]] = []

    async def caller(
        who: Promptable, text: str, cancel: CancelToken | None
    ) -> AgentResponse | None:
        seen.append((who.name, text))
        if who is not taken_agent:
            return None
        return AgentResponse(text=f"taken: {text}", usage=Usage(input_tokens=5, requests=1))

    async def both(ctx: GraphContext) -> dict[str, Any]:
        first = await ctx.prompt(taken_agent, "one")
        second = await ctx.prompt(left, "two")
        return {"output": f"{first.text} / {second.text}"}

    graph = GraphBuilder("g").add_node("both", both).add_edge(START, "both").add_edge("both", END)
    token = agent_caller.set(caller)
    try:
        result = await graph.build().run({})
    finally:
        agent_caller.reset(token)
    assert result.state["output"] == "taken: one / left answers"
    assert seen == [("taken", "one"), ("left", "two")]
    assert result.usage.input_tokens == 5 + 2  # both counted in the run's totals
