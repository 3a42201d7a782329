"""The ``on_agent_event`` observer: what the agent in a graph, DAG or workflow node does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, Usage, tool
from daimon.core.events import Done, StreamEvent, ToolCallEnd, ToolResult, UsageEvent
from daimon.kit.streaming import events_from_response
from daimon.models import FunctionModel
from daimon.orchestration import (
    END,
    START,
    DagBuilder,
    GraphBuilder,
    GraphContext,
    NodeAgentEvent,
    NodeContext,
    NodeError,
    NodeEvent,
    WorkflowBuilder,
    workflow_node,
)

AGENT_KINDS = [
    "tool_call_start",
    "tool_call_delta",
    "tool_call_end",
    "tool_call_start",
    "tool_call_delta",
    "tool_call_end",
    "usage",
    "tool_result",
    "tool_result",
    "text_delta",
    "usage",
    "done",
]
"""A streamed run of :func:`weather_agent`: two tool calls, their results, then the answer."""


def weather_agent(modes: list[str], city_delay: float = 0.0) -> Agent:
    """Calls ``forecast`` (works) and ``alerts`` (fails) at once, then answers with the forecast.

    Its model can generate and stream; ``modes`` records which way each call was made.
    """

    @tool
    async def forecast(city: str) -> str:
        """The forecast for a city."""
        await asyncio.sleep(city_delay)
        return f"sunny in {city}"

    @tool
    def alerts(city: str) -> str:
        """Weather alerts for a city."""
        raise ConnectionError("the alerts service is down")

    def answer(request: ChatRequest) -> ChatResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        usage = Usage(input_tokens=10, output_tokens=4, requests=1)
        if not results:
            city = request.messages[-1].text
            return ChatResponse.tool_use(
                ToolCall(id="f1", name="forecast", arguments={"city": city}),
                ToolCall(id="a1", name="alerts", arguments={"city": city}),
                usage=usage,
            )
        return ChatResponse.reply(results[0].text, usage=usage)

    def generate(request: ChatRequest) -> ChatResponse:
        modes.append("generate")
        return answer(request)

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        modes.append("stream")
        for event in events_from_response(answer(request)):
            yield event

    model = FunctionModel(generate, stream_function=stream, model_name="weather-model")
    return Agent(model, name="weather", tools=[forecast, alerts])


def inner(seen: list[NodeEvent | NodeAgentEvent], node: str) -> list[StreamEvent]:
    """The agent events reported for ``node``, in order."""
    return [e.event for e in seen if isinstance(e, NodeAgentEvent) and e.node == node]


def check_weather_run(events: list[StreamEvent], city: str) -> None:
    """``events`` are one whole streamed run of the weather agent, asked about ``city``."""
    assert [event.kind for event in events] == AGENT_KINDS
    ends = [event for event in events if isinstance(event, ToolCallEnd)]
    assert [(e.call.name, e.call.arguments) for e in ends] == [
        ("forecast", {"city": city}),
        ("alerts", {"city": city}),
    ]
    results = {e.name: e for e in events if isinstance(e, ToolResult)}
    assert results["forecast"].output.content == f"sunny in {city}"
    assert not results["forecast"].is_error
    assert results["alerts"].is_error
    assert "the alerts service is down" in results["alerts"].output.content
    usages = [e for e in events if isinstance(e, UsageEvent)]
    assert [u.usage.input_tokens for u in usages] == [10, 10]
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text == f"sunny in {city}"


async def test_a_graph_reports_its_agent_node_events_tagged_and_between_start_and_end() -> None:
    seen: list[NodeEvent | NodeAgentEvent] = []
    modes: list[str] = []
    agent = weather_agent(modes)

    async def ask(ctx: GraphContext) -> dict[str, Any]:
        response = await ctx.prompt(agent, ctx.state["city"])
        return {"output": response.text}

    graph = (
        GraphBuilder()
        .add_node("pick", lambda ctx: {"city": ctx.state["input"].title()})
        .add_node("ask", ask)
        .add_edge(START, "pick")
        .add_edge("pick", "ask")
        .add_edge("ask", END)
        .build()
    )
    result = await graph.run({"input": "oslo"}, on_node=seen.append, on_agent_event=seen.append)

    assert result.state["output"] == "sunny in Oslo"
    assert result.usage == Usage(input_tokens=20, output_tokens=8, requests=2)
    assert modes == ["stream", "stream"]
    kinds = [(e.kind, e.node) for e in seen]
    assert kinds == [
        ("node_started", "pick"),
        ("node_finished", "pick"),
        ("node_started", "ask"),
        *[("node_event", "ask")] * len(AGENT_KINDS),
        ("node_finished", "ask"),
    ]
    check_weather_run(inner(seen, "ask"), "Oslo")
    assert {e.step for e in seen if isinstance(e, NodeAgentEvent)} == {1}
    tool_results = [e for e in inner(seen, "ask") if isinstance(e, ToolResult)]
    assert all(r.duration >= 0 for r in tool_results)


async def test_parallel_dag_agent_nodes_each_report_their_own_agent() -> None:
    seen: list[NodeEvent | NodeAgentEvent] = []
    modes: list[str] = []
    agents = {"north": weather_agent(modes, 0.03), "south": weather_agent(modes, 0.03)}

    async def ask(inputs: Mapping[str, Any], ctx: NodeContext) -> str:
        response = await ctx.prompt(agents[ctx.node], f"{inputs['input']} {ctx.node}")
        return response.text

    dag = (
        DagBuilder()
        .add_node("north", ask)
        .add_node("south", ask)
        .add_node("both", lambda inputs: " / ".join(inputs.values()), depends_on=["north", "south"])
        .build()
    )
    result = await dag.run({"input": "Bergen"}, on_node=seen.append, on_agent_event=seen.append)

    assert result.outputs["both"] == "sunny in Bergen north / sunny in Bergen south"
    assert result.usage == Usage(input_tokens=40, output_tokens=16, requests=4)
    check_weather_run(inner(seen, "north"), "Bergen north")
    check_weather_run(inner(seen, "south"), "Bergen south")
    assert not inner(seen, "both")
    # Both ran at once: each one's tool calls were reported before the other's node finished.
    kinds = [(e.kind, e.node) for e in seen]
    for node, other in (("north", "south"), ("south", "north")):
        started = kinds.index(("node_started", node))
        finished = kinds.index(("node_finished", node))
        own = [i for i, k in enumerate(kinds) if k == ("node_event", node)]
        assert started < own[0] and own[-1] < finished
        assert own[0] < kinds.index(("node_finished", other))
    assert all(e.step is None for e in seen if isinstance(e, NodeAgentEvent))


async def test_a_workflow_node_with_a_context_reports_its_agent() -> None:
    seen: list[NodeAgentEvent] = []
    modes: list[str] = []
    agent = weather_agent(modes)

    @workflow_node(output="city")
    def clean(text: str) -> str:
        return text.strip().title()

    @workflow_node(output="forecast")
    async def forecast(city: str, ctx: NodeContext) -> str:
        return (await ctx.prompt(agent, city)).text

    workflow = WorkflowBuilder(inputs={"text": str}).add(clean).add(forecast).build()
    result = await workflow.run({"text": "  tromsø "}, on_agent_event=seen.append)

    assert result.fields["forecast"] == "sunny in Tromsø"
    assert {e.node for e in seen} == {"forecast"}
    check_weather_run([e.event for e in seen], "Tromsø")
    assert result.usage == Usage(input_tokens=20, output_tokens=8, requests=2)


async def test_without_the_observer_agents_are_prompted_unstreamed_as_before() -> None:
    told: list[NodeEvent] = []
    for on_node in (None, told.append):
        modes: list[str] = []
        agent = weather_agent(modes)

        async def ask(ctx: GraphContext, agent: Agent = agent) -> dict[str, Any]:
            return {"output": (await ctx.prompt(agent, "Rome")).text}

        graph = (
            GraphBuilder().add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END).build()
        )
        result = await graph.run(on_node=on_node)

        assert result.state["output"] == "sunny in Rome"
        assert result.usage == Usage(input_tokens=20, output_tokens=8, requests=2)
        assert modes == ["generate", "generate"]
    assert [event.kind for event in told] == ["node_started", "node_finished"]


async def test_an_agent_that_cannot_stream_is_prompted_and_reports_nothing(
    fake_agent: Any,
) -> None:
    seen: list[NodeAgentEvent] = []
    agent = fake_agent(tokens=6, cost=0.25)

    async def ask(inputs: Mapping[str, Any], ctx: NodeContext) -> str:
        return (await ctx.prompt(agent, "hello")).text

    dag = DagBuilder().add_node("ask", ask).build()
    result = await dag.run(on_agent_event=seen.append)

    assert result.outputs["ask"] == "<hello>"
    assert agent.prompts == ["hello"]
    assert result.usage.input_tokens == 6 and result.cost == 0.25
    assert seen == []


async def test_an_agent_observer_that_raises_fails_the_node_and_stops_the_agent() -> None:
    modes: list[str] = []
    agent = weather_agent(modes)

    def observer(event: NodeAgentEvent) -> None:
        if isinstance(event.event, ToolCallEnd):
            raise LookupError("observer broke")

    async def ask(ctx: GraphContext) -> dict[str, Any]:
        return {"output": (await ctx.prompt(agent, "Lima")).text}

    graph = GraphBuilder().add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END).build()
    with pytest.raises(NodeError, match="observer broke"):
        await graph.run(on_agent_event=observer)
    assert modes == ["stream"]  # no tool ran and no second model call was made
