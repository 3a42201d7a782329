"""Graphs, DAGs and workflows as promptables: text in, the answer out, events streamed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Message, Role, ToolCall, Usage, tool
from daimon.core import (
    AgentResponse,
    ApprovalRequiredError,
    BuilderError,
    OrchestrationError,
    Promptable,
)
from daimon.core.events import Done, StreamEvent, TextDelta
from daimon.models import FunctionModel
from daimon.orchestration import (
    END,
    START,
    DagBuilder,
    Graph,
    GraphBuilder,
    GraphContext,
    PromptableFlow,
    WorkflowBuilder,
    workflow_node,
)


def forecaster() -> Agent:
    """Calls ``forecast(city)`` on the prompt, then answers with its result (2 model calls)."""

    @tool
    def forecast(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    def model(request: ChatRequest) -> ChatResponse:
        last = request.messages[-1]
        usage = Usage(input_tokens=5, output_tokens=2, requests=1)
        if last.role is Role.TOOL:
            return ChatResponse.reply(last.text, usage=usage)
        call = ToolCall(id="c1", name="forecast", arguments={"city": last.text})
        return ChatResponse.tool_use(call, usage=usage)

    return Agent(FunctionModel(model), name="forecaster", tools=[forecast])


def refunder() -> Agent:
    """Calls ``refund``, a tool that needs a person's approval: its runs pause."""

    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund money."""
        return "refunded"

    call = ToolCall(id="r1", name="refund", arguments={"amount": 5})
    model = FunctionModel(lambda request: ChatResponse.tool_use(call))
    return Agent(model, name="refunder", tools=[refund])


def asking(agent: Agent, name: str = "weather") -> Graph:
    """One node, ``ask``, prompting ``agent`` with the input; its answer is the output."""

    async def ask(ctx: GraphContext) -> dict[str, Any]:
        response = await ctx.prompt(agent, ctx.state["input"])
        return {"output": f"forecast: {response.text}"}

    return GraphBuilder(name).add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END)


async def test_a_graph_answers_a_prompt_as_an_agent_would() -> None:
    graph = asking(forecaster()).build()
    assert isinstance(graph, Promptable)

    response = await graph.prompt("Oslo", run_id="run-1")

    assert isinstance(response, AgentResponse)
    assert response.text == response.output == "forecast: sunny in Oslo"
    assert response.run_id == "run-1" and response.session_id is None
    assert (response.usage.input_tokens, response.usage.requests, response.iterations) == (10, 2, 2)
    assert [m.role for m in response.messages] == [Role.USER, Role.ASSISTANT]
    assert not response.paused


async def test_the_defaults_map_text_in_and_the_result_out() -> None:
    @workflow_node(output="words")
    def split(text: str) -> list[str]:
        return text.split()

    @workflow_node(output="count")
    def count(words: list[str]) -> int:
        return len(words)

    workflow = WorkflowBuilder("counter", inputs={"text": str}).add(split).add(count).build()
    counted = await workflow.prompt(Message.user("a b c"))
    assert (counted.text, counted.output) == ("3", 3)  # not a string: JSON text, typed output

    dag = (
        DagBuilder("two")
        .add_node("left", lambda inputs: {"got": inputs["input"]})
        .add_node("right", lambda inputs: [1, 2])
        .build()
    )
    both = await dag.prompt("x")
    assert both.output == {"left": {"got": "x"}, "right": [1, 2]}
    assert both.text == '{"left":{"got":"x"},"right":[1,2]}'

    mapped = PromptableFlow(
        workflow,
        name="words",
        input=lambda text: {"text": text.upper()},
        output=lambda result: result.fields["words"],
    )
    assert mapped.name == "words"
    assert (await mapped.prompt("a b")).output == ["A", "B"]


async def test_a_flow_keeps_no_conversation() -> None:
    graph = asking(forecaster()).build()
    # A session id and deps are accepted (front ends always pass them) and not used.
    answered = await graph.prompt("Rome", session_id="s1", deps=object())
    assert answered.text == "forecast: sunny in Rome" and answered.session_id is None
    with pytest.raises(BuilderError, match="'weather' keeps no conversation"):
        await graph.prompt("Rome", history=[Message.user("earlier")])
    with pytest.raises(BuilderError, match="without history or instructions"):
        graph.prompt_stream("Rome", instructions="be brief")
    two = (
        WorkflowBuilder("two", inputs={"a": str, "b": str})
        .add(workflow_node(output="c")(lambda a, b: a + b), name="join")
        .build()
    )
    with pytest.raises(BuilderError, match=r"2 input fields \(a, b\).*PromptableFlow"):
        await two.prompt("x")
    bad = PromptableFlow(graph, input=lambda text: text)  # type: ignore[arg-type,return-value]
    with pytest.raises(OrchestrationError, match="input= must return a mapping, not str"):
        await bad.prompt("x")


async def test_the_stream_carries_the_agents_tool_events_then_the_answer_as_its_text() -> None:
    graph = asking(forecaster()).build()
    events = [event async for event in graph.prompt_stream("Oslo")]
    kinds = [event.kind for event in events]
    # The node's agent: its tool call, usage and result as they happen; its own text (the
    # draft "sunny in Oslo") is not the flow's answer, so the stream's text is the answer.
    assert kinds[:5] == [
        "tool_call_start",
        "tool_call_delta",
        "tool_call_end",
        "usage",
        "tool_result",
    ]
    assert kinds[-2:] == ["text_delta", "done"]
    texts = [event.text for event in events if isinstance(event, TextDelta)]
    assert texts == ["forecast: sunny in Oslo"]
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text == "forecast: sunny in Oslo"
    assert done.response.usage.requests == 2


async def test_a_paused_agent_fails_the_flow_naming_the_tool_the_node_and_the_flow() -> None:
    graph = asking(refunder(), name="refunds").build()
    expected = r"refund need\(s\) a person's approval, which node 'ask' of flow 'refunds' cannot"
    with pytest.raises(ApprovalRequiredError, match=expected) as raised:
        await graph.prompt("give me my money back")
    assert raised.value.tool_names == ("refund",)
    with pytest.raises(ApprovalRequiredError, match=expected):
        async for _ in graph.prompt_stream("give me my money back"):
            pass


async def test_a_consumer_that_leaves_the_stream_stops_the_run() -> None:
    sleeping, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(ctx: GraphContext) -> dict[str, Any]:
        await ctx.prompt(forecaster(), "Oslo")  # streamed: its events reach the consumer
        sleeping.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    graph = (
        GraphBuilder("slow").add_node("slow", slow).add_edge(START, "slow").add_edge("slow", END)
    ).build()
    stream = graph.prompt_stream("x")
    assert isinstance(stream, AsyncGenerator)
    async with contextlib.aclosing(stream):
        first: StreamEvent = await anext(stream)
        assert first.kind == "tool_call_start"
        await asyncio.wait_for(sleeping.wait(), 10)  # the run goes on while nobody reads
    assert cancelled.is_set()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert others == []
