"""Graphs, DAGs and workflows served over HTTP: listed with drawings, run, streamed node by node."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, Usage, tool
from daimon.core.errors import BuilderError
from daimon.models import FunctionModel
from daimon.orchestration import (
    END,
    START,
    Dag,
    DagBuilder,
    Graph,
    GraphBuilder,
    GraphContext,
    NodeContext,
    WorkflowBuilder,
    workflow_node,
)
from daimon.server import ServedFlow, create_app
from daimon.server._schemas import AgentsResponse, PromptResponse

from .conftest import TOKEN, Calls, LiveServer, echo, sse_events

Live = Callable[..., LiveServer]


def writer() -> Agent:
    """Answers ``draft: <prompt>``, using 7 input and 3 output tokens."""

    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply(
            f"draft: {request.messages[-1].text}",
            usage=Usage(input_tokens=7, output_tokens=3, requests=1),
        )

    return Agent(FunctionModel(model, model_name="writer-model"), name="writer")


def research_graph() -> Graph:
    """classify routes to ``search`` (questions) or to ``write``; ``write`` asks an agent."""
    agent = writer()

    def classify(ctx: GraphContext) -> dict[str, Any]:
        return {"question": ctx.state["input"].endswith("?")}

    async def search(ctx: GraphContext) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"notes": f"notes on {ctx.state['input']}"}

    async def write(ctx: GraphContext) -> dict[str, Any]:
        response = await ctx.prompt(agent, ctx.state.get("notes", ctx.state["input"]))
        return {"answer": response.text}

    def route(state: Mapping[str, Any]) -> str:
        return "search" if state["question"] else "write"

    return (
        GraphBuilder("research")
        .add_node("classify", classify)
        .add_node("search", search)
        .add_node("write", write)
        .add_edge(START, "classify")
        .add_router("classify", route, {"search": "search", "write": "write"})
        .add_edge("search", "write")
        .add_edge("write", END)
        .build()
    )


def fragile_dag(fail: bool = True) -> Dag:
    """fetch and parse in parallel; ``parse`` raises when ``fail``; report joins them."""

    async def fetch(inputs: Mapping[str, Any]) -> str:
        await asyncio.sleep(0.02)
        return f"page for {inputs['input']}"

    def parse(inputs: Mapping[str, Any]) -> str:
        if fail:
            raise ValueError("unparseable page")
        return "parsed"

    return (
        DagBuilder("pipeline")
        .add_node("fetch", fetch)
        .add_node("parse", parse)
        .add_node(
            "report", lambda inputs: " + ".join(inputs.values()), depends_on=["fetch", "parse"]
        )
        .build()
    )


def research(**options: Any) -> ServedFlow:
    return ServedFlow(
        research_graph(),
        input=lambda text: {"input": text},
        output=lambda result: result.state["answer"],
        **options,
    )


def stream(server: LiveServer, body: dict[str, Any], **headers: str) -> list[tuple[str, Any]]:
    with (
        server.client() as client,
        client.stream("POST", "/prompt/stream", json=body, headers=headers) as reply,
    ):
        assert reply.status_code == 200, reply.read()
        lines = list(reply.iter_lines())
    return [(kind, json.loads(data)) for kind, data in sse_events(lines) if kind != ":"]


def test_the_agents_listing_draws_each_flow_as_nodes_and_edges(live: Live) -> None:
    server = live({"echo": echo(Calls()), "research": research(), "pipeline": fragile_dag()})
    listing = server.client().get("/agents").json()

    AgentsResponse.model_validate(listing)  # what the OpenAPI document promises
    assert listing["default"] == "echo"
    assert [agent["name"] for agent in listing["agents"]] == ["echo", "research", "pipeline"]
    assert "flow" not in listing["agents"][0]
    graph = listing["agents"][1]
    assert graph["model"] == "graph" and graph["tools"] == []
    drawing = graph["flow"]
    assert drawing["kind"] == "graph"
    assert [node["id"] for node in drawing["nodes"]] == [
        "__start__",
        "classify",
        "search",
        "write",
        "__end__",
    ]
    assert drawing["nodes"][0] == {"id": "__start__", "label": "START", "terminal": True}
    assert drawing["nodes"][1] == {"id": "classify", "label": "classify", "terminal": False}
    edges = {(e["source"], e["target"], e["label"]) for e in drawing["edges"]}
    assert edges == {
        ("__start__", "classify", ""),
        ("classify", "search", "search"),
        ("classify", "write", "write"),
        ("search", "write", ""),
        ("write", "__end__", ""),
    }
    dag = listing["agents"][2]["flow"]
    assert dag["kind"] == "dag"
    assert [node["id"] for node in dag["nodes"]] == ["fetch", "parse", "report"]
    assert {(e["source"], e["target"]) for e in dag["edges"]} == {
        ("fetch", "report"),
        ("parse", "report"),
    }
    ready = server.client().get("/ready").json()
    assert ready["agents"] == ["echo", "research", "pipeline"]


def test_prompt_runs_a_flow_and_answers_like_an_agent(live: Live) -> None:
    server = live(research())
    reply = server.client().post("/prompt", json={"input": "what is rust?"})

    assert reply.status_code == 200, reply.text
    body = reply.json()
    PromptResponse.model_validate(body)
    assert body["text"] == "draft: notes on what is rust?"
    assert body["agent"] == "research"
    assert body["session_id"] is None and body["output"] is None
    assert body["usage"]["input_tokens"] == 7 and body["usage"]["output_tokens"] == 3
    assert body["iterations"] == 1 and len(body["run_id"]) == 32
    # Another route through the router: no search.
    direct = server.client().post("/prompt", json={"input": "hello"}).json()
    assert direct["text"] == "draft: hello"


def test_the_stream_sends_node_events_in_order_then_done(live: Live) -> None:
    server = live({"research": research()})
    events = stream(server, {"input": "what is rust?", "agent": "research"})

    assert [(kind, data.get("node")) for kind, data in events] == [
        ("node_started", "classify"),
        ("node_finished", "classify"),
        ("node_started", "search"),
        ("node_finished", "search"),
        ("node_started", "write"),
        ("node_event", "write"),  # the writer agent's own events, streamed for the flow
        ("node_event", "write"),
        ("node_event", "write"),
        ("node_finished", "write"),
        ("done", None),
    ]
    agent = [data["event"]["kind"] for kind, data in events if kind == "node_event"]
    assert agent == ["text_delta", "usage", "done"]
    started, finished = events[2][1], events[3][1]
    assert started == {"kind": "node_started", "node": "search", "step": 1}
    assert finished["kind"] == "node_finished" and finished["step"] == 1
    assert finished["seconds"] >= 0.05  # search sleeps 0.05 s
    done = events[-1][1]
    assert done["kind"] == "done"
    assert done["response"]["text"] == "draft: notes on what is rust?"
    assert done["response"]["usage"]["total_tokens"] == 10


def forecaster() -> Agent:
    """Calls ``forecast`` and ``alerts`` (which fails) at once, then answers with the forecast."""

    @tool
    async def forecast(city: str) -> str:
        """The forecast for a city."""
        await asyncio.sleep(0.05)
        return f"sunny in {city}"

    @tool
    def alerts(city: str) -> str:
        """Weather alerts for a city."""
        raise ConnectionError("the alerts service is down")

    def model(request: ChatRequest) -> ChatResponse:
        usage = Usage(input_tokens=5, output_tokens=2, requests=1)
        results = [m for m in request.messages if m.role is Role.TOOL]
        if results:
            return ChatResponse.reply(results[0].text, usage=usage)
        city = request.messages[-1].text
        return ChatResponse.tool_use(
            ToolCall(id="f1", name="forecast", arguments={"city": city}),
            ToolCall(id="a1", name="alerts", arguments={"city": city}),
            usage=usage,
        )

    return Agent(FunctionModel(model, model_name="forecaster"), tools=[forecast, alerts])


def test_an_agent_node_streams_its_tool_calls_tagged_with_the_node(live: Live) -> None:
    agent = forecaster()

    async def ask(inputs: Mapping[str, Any], ctx: NodeContext) -> str:
        return (await ctx.prompt(agent, inputs["city"])).text

    dag = (
        DagBuilder("weather")
        .add_node("city", lambda inputs: inputs["input"].strip().title())
        .add_node("ask", ask, depends_on="city")
        .build()
    )
    server = live({"weather": dag})
    events = stream(server, {"input": " oslo "})

    kinds = [(kind, data.get("node")) for kind, data in events]
    first, last = kinds.index(("node_started", "ask")), kinds.index(("node_finished", "ask"))
    inside = events[first + 1 : last]
    assert inside and all(kind == "node_event" for kind, _ in inside)
    assert kinds[last + 1 :] == [("done", None)]
    bodies = [data for _, data in inside]
    assert all(
        b["kind"] == "node_event" and b["node"] == "ask" and b["step"] is None for b in bodies
    )
    agent_events = [body["event"] for body in bodies]
    assert [event["kind"] for event in agent_events] == [
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
    ends = [event["call"] for event in agent_events if event["kind"] == "tool_call_end"]
    assert [(call["name"], call["arguments"]) for call in ends] == [
        ("forecast", {"city": "Oslo"}),
        ("alerts", {"city": "Oslo"}),
    ]
    results = {e["name"]: e for e in agent_events if e["kind"] == "tool_result"}
    assert results["forecast"]["output"]["content"] == "sunny in Oslo"
    assert results["forecast"]["output"]["is_error"] is False
    assert results["forecast"]["duration"] >= 0.05
    assert results["alerts"]["output"]["is_error"] is True
    assert "the alerts service is down" in results["alerts"]["output"]["content"]
    # Encoded as the agent's own stream encodes it: the inner done carries the agent's response.
    assert agent_events[-1]["response"]["text"] == "sunny in Oslo"
    done = events[-1][1]
    assert done["response"]["text"] == "sunny in Oslo"
    assert done["response"]["usage"]["total_tokens"] == 14
    # Answered whole (POST /prompt), the same flow gives the same answer.
    reply = server.client().post("/prompt", json={"input": "oslo"})
    assert reply.status_code == 200 and reply.json()["text"] == "sunny in Oslo"


def test_a_failing_node_is_reported_then_the_stream_ends_with_an_error(live: Live) -> None:
    server = live({"pipeline": fragile_dag()})
    events = stream(server, {"input": "x"})

    failed = [data for kind, data in events if kind == "node_failed"]
    assert len(failed) == 1
    assert failed[0]["node"] == "parse" and failed[0]["error_type"] == "ValueError"
    assert failed[0]["message"] == "node 'parse' failed: ValueError: unparseable page"
    assert "step" in failed[0] and failed[0]["step"] is None
    assert events[-1][0] == "error"
    assert events[-1][1]["error_type"] == "NodeError"
    assert "unparseable page" in events[-1][1]["message"]
    assert not any(data.get("node") == "report" for _, data in events)

    reply = server.client().post("/prompt", json={"input": "x"})
    assert reply.status_code == 500
    assert reply.json()["error"] == {
        "type": "NodeError",
        "message": "node 'parse' failed: ValueError: unparseable page",
    }


def test_bare_flows_get_the_documented_defaults(live: Live) -> None:
    graph = (
        GraphBuilder("shout")
        .add_node("upper", lambda ctx: {"output": ctx.state["input"].upper()})
        .add_edge(START, "upper")
        .add_edge("upper", END)
        .build()
    )

    @workflow_node(output="words")
    def split(text: str) -> list[str]:
        return text.split()

    @workflow_node(output="count")
    def count(words: list[str], ctx: NodeContext) -> int:
        return len(words)

    workflow = WorkflowBuilder("counter", inputs={"text": str}).add(split).add(count).build()
    server = live({"shout": graph, "pipeline": fragile_dag(fail=False), "counter": workflow})
    client = server.client()

    assert client.post("/prompt", json={"input": "hey"}).json()["text"] == "HEY"
    dag = client.post("/prompt", json={"input": "q", "agent": "pipeline"}).json()
    assert dag["text"] == "page for q + parsed"  # the DAG's last node
    counted = client.post("/prompt", json={"input": "a b c", "agent": "counter"}).json()
    assert counted["text"] == "3" and counted["output"] == 3  # not a string: JSON
    listing = client.get("/agents").json()["agents"]
    assert [agent["model"] for agent in listing] == ["graph", "dag", "workflow"]
    fields = listing[2]["flow"]
    assert [node["label"] for node in fields["nodes"]] == ["START", "split", "count", "END"]
    assert [(e["source"], e["target"], e["label"]) for e in fields["edges"]] == [
        ("__start__", "split", "text"),
        ("split", "count", "words"),
        ("count", "__end__", "count"),
    ]


def test_a_flow_that_cannot_be_served_is_refused_with_the_reason() -> None:
    two = (
        WorkflowBuilder("two", inputs={"a": str, "b": str})
        .add(workflow_node(output="c")(lambda a, b: a + b), name="join")
        .build()
    )
    with pytest.raises(BuilderError, match=r"2 input fields \(a, b\).*input=lambda"):
        ServedFlow(two)
    assert ServedFlow(two, input=lambda text: {"a": text, "b": text}).name == "two"
    with pytest.raises(BuilderError, match="serves a Graph, Dag or Workflow, not str"):
        ServedFlow("graph")  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="not an Agent or a flow"):
        create_app({"a": 42})  # type: ignore[dict-item]
    with pytest.raises(BuilderError, match="not usable in a URL"):
        create_app({"a flow": research()})


def test_input_and_output_functions_that_fail_are_named(live: Live) -> None:
    server = live(
        {
            "bad-input": ServedFlow(research_graph(), input=lambda text: text),  # type: ignore[arg-type,return-value]
            "bad-output": ServedFlow(research_graph(), output=lambda result: result.state["nope"]),
        }
    )
    client = server.client()
    reply = client.post("/prompt", json={"input": "q", "agent": "bad-input"})
    assert reply.status_code == 500
    assert reply.json()["error"] == {
        "type": "OrchestrationError",
        "message": "flow 'research': input= must return a mapping, not str",
    }
    reply = client.post("/prompt", json={"input": "q", "agent": "bad-output"})
    assert reply.status_code == 500
    assert reply.json()["error"]["message"] == (
        "flow 'research': output= failed on the result: KeyError: 'nope'"
    )


def test_flows_answer_chat_requests_of_one_message_and_keep_no_sessions(live: Live) -> None:
    server = live({"research": research(), "echo": echo(Calls())})
    client = server.client()
    models = client.get("/v1/models").json()["data"]
    assert [model["id"] for model in models] == ["research", "echo"]
    chat = client.post(
        "/v1/chat/completions",
        json={"model": "research", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 200
    assert chat.json()["choices"][0]["message"]["content"] == "draft: hi"
    earlier = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    chat = client.post("/v1/chat/completions", json={"model": "research", "messages": earlier})
    assert chat.status_code == 400
    assert chat.json()["error"]["code"] == "flow_takes_one_message"
    session = client.get("/sessions/s1")  # the default is the flow
    assert session.status_code == 404
    assert "keep no sessions" in session.json()["error"]["message"]
    # A session id sent with a prompt is ignored, not an error.
    reply = client.post("/prompt", json={"input": "hi", "session_id": "s1"})
    assert reply.status_code == 200 and reply.json()["session_id"] is None


def test_flows_are_behind_the_token_like_agents(live: Live) -> None:
    server = live(research(), token=TOKEN)
    client = server.client()
    assert client.post("/prompt", json={"input": "q"}).status_code == 401
    assert client.post("/prompt/stream", json={"input": "q"}).status_code == 401
    assert client.get("/agents").status_code == 401
    authorized = {"authorization": f"Bearer {TOKEN}"}
    events = stream(server, {"input": "q"}, **authorized)
    assert events[-1][0] == "done"


async def test_a_flow_nobody_reads_is_cancelled_after_the_grace_and_leaks_no_task(
    live: Live,
) -> None:
    started: list[float] = []
    cancelled: list[float] = []

    async def slow(ctx: GraphContext) -> None:
        started.append(time.monotonic())
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(time.monotonic())
            raise

    graph = (
        GraphBuilder("slow")
        .add_node("slow", slow)
        .add_node("after", lambda ctx: None)
        .add_edge(START, "slow")
        .add_edge("slow", "after")
        .add_edge("after", END)
        .build()
    )
    server = live(graph, stream_grace=0.3)
    baseline = server.task_count()
    async with (
        server.async_client() as client,
        client.stream("POST", "/prompt/stream", json={"input": "go"}) as reply,
    ):
        async for line in reply.aiter_lines():
            if line == "event: node_started":
                break
        assert server.task_count() > baseline
    closed = time.monotonic()
    deadline = time.monotonic() + 3
    while not cancelled:
        assert time.monotonic() < deadline, "the node was not cancelled"
        await asyncio.sleep(0.02)
    assert cancelled[0] - closed < 1.0 and len(started) == 1
    while server.task_count() != baseline:
        assert time.monotonic() < deadline + 3, "tasks leaked"
        await asyncio.sleep(0.02)


def test_served_flow_loads_no_web_library() -> None:
    code = (
        "import json, sys\n"
        "from daimon.orchestration import DagBuilder\n"
        "from daimon.server import ServedFlow\n"
        "ServedFlow(DagBuilder().add_node('a', lambda inputs: 1).build()).drawing()\n"
        "libraries = ('fastapi', 'starlette', 'uvicorn', 'pydantic', 'pydantic_core')\n"
        "print(json.dumps(sorted(m for m in libraries if m in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


FLOW_MODULE = """
from daimon.orchestration import END, START, GraphBuilder, WorkflowBuilder, workflow_node
from daimon.server import ServedFlow

graph = (
    GraphBuilder("shout")
    .add_node("upper", lambda ctx: {"output": ctx.state["input"].upper()})
    .add_edge(START, "upper")
    .add_edge("upper", END)
    .build()
)
served = ServedFlow(graph, name="loud", output=lambda result: result.state["output"] + "!")
two_inputs = (
    WorkflowBuilder("two", inputs={"a": str, "b": str})
    .add(workflow_node(output="c")(lambda a, b: a + b), name="join")
    .build()
)
"""


@pytest.mark.timeout(120)
def test_daimon_serve_serves_flows_named_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "flows_app.py").write_text(FLOW_MODULE)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("DAIMON_TOKEN", None)
    command = [sys.executable, "-m", "daimon.cli", "serve", "flows_app:graph", "flows_app:served"]

    refused = subprocess.run(
        [*command[:4], "flows_app:two_inputs"], env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "declares 2 input fields (a, b)" in refused.stderr

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--no-ui"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/health", timeout=5)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "daimon serve did not come up"
                time.sleep(0.2)
        listing = httpx.get(f"{url}/agents").json()
        assert [(a["name"], a["model"]) for a in listing["agents"]] == [
            ("shout", "graph"),
            ("loud", "graph"),
        ]
        reply = httpx.post(f"{url}/prompt", json={"input": "hey", "agent": "loud"}).json()
        assert reply["text"] == "HEY!"
        assert httpx.post(f"{url}/prompt", json={"input": "hey"}).json()["text"] == "HEY"
    finally:
        process.terminate()
        process.communicate(timeout=30)
