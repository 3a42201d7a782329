"""Any promptable served over HTTP: a Supervisor, a HandoffNetwork, a flow, beside agents."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.core.errors import BuilderError
from daimon.models import FunctionModel
from daimon.multiagent import HandoffNetwork, Supervisor
from daimon.orchestration import WorkflowBuilder, workflow_node
from daimon.server import create_app

from .conftest import Calls, LiveServer, echo, sdk, sse_events

Live = Callable[..., LiveServer]


def team(calls: Calls) -> Supervisor:
    """Delegates the prompt to ``echo``, then answers ``team: <its answer>``."""

    def model(request: ChatRequest) -> ChatResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return ChatResponse.reply(f"team: {last.text}")
        task = {"agent": "echo", "task": last.text}
        return ChatResponse.tool_use(ToolCall(id="d1", name="delegate", arguments=task))

    return Supervisor(FunctionModel(model, model_name="lead-model"), {"echo": echo(calls)})


def desk(pause: bool = False) -> HandoffNetwork:
    """``triage`` hands anything about refunds to ``billing``, which answers with what it saw.

    With ``pause``, billing calls ``refund`` (a tool that needs approval) instead.
    """

    def triage_model(request: ChatRequest) -> ChatResponse:
        text = request.messages[-1].text
        if "refund" in text:
            call = ToolCall(id="h1", name="transfer_to_billing", arguments={"reason": "refund"})
            return ChatResponse.tool_use(call)
        return ChatResponse.reply(f"triage: {text}")

    @tool(requires_approval=True)
    def refund() -> str:
        """Refund the last charge."""
        return "refunded"

    def billing_model(request: ChatRequest) -> ChatResponse:
        if pause:
            return ChatResponse.tool_use(ToolCall(id="r1", name="refund", arguments={}))
        users = [m.text for m in request.messages if m.role is Role.USER]
        system = [m.text for m in request.messages if m.role is Role.SYSTEM]
        return ChatResponse.reply(f"billing saw {users[0]!r}; rules: {system}")

    triage = Agent(FunctionModel(triage_model), name="triage")
    billing = Agent(FunctionModel(billing_model), name="billing", tools=[refund])
    return HandoffNetwork({"triage": triage, "billing": billing}, start="triage", name="desk")


def shouter() -> Any:
    @workflow_node(output="loud")
    def shout(text: str) -> str:
        return text.upper() + "!"

    return WorkflowBuilder("shout", inputs={"text": str}).add(shout).build()


def test_a_supervisor_and_a_network_answer_prompts_and_streams(live: Live) -> None:
    server = live({"team": team(Calls()), "desk": desk()})
    client = server.client()

    answered = client.post("/prompt", json={"input": "hi"}).json()
    assert answered["agent"] == "team"
    assert answered["text"] == "team: echo: hi (1 messages)"
    assert answered["iterations"] == 2
    handed = client.post("/prompt", json={"input": "a refund please", "agent": "desk"}).json()
    assert handed["text"] == "billing saw 'a refund please'; rules: []"
    assert handed["output"]["agent"] == "billing"

    with client.stream("POST", "/prompt/stream", json={"input": "yo"}) as streamed:
        frames = sse_events(list(streamed.iter_lines()))
    kinds = [event for event, _ in frames if event != ":"]
    assert kinds[0] == "tool_call_start" and kinds[-1] == "done"
    assert "tool_result" in kinds  # the delegation's answer
    assert json.loads(frames[-1][1])["response"]["text"] == "team: echo: yo (1 messages)"

    listing = client.get("/agents").json()["agents"]
    assert listing == [
        {"name": "team", "model": "lead-model", "tools": ["delegate"]},
        {"name": "desk", "model": "HandoffNetwork", "tools": []},
    ]


def test_a_network_keeps_its_sessions_where_the_server_can_show_them(live: Live) -> None:
    server = live({"desk": desk()})
    client = server.client()
    for text in ("hello", "a refund please"):
        reply = client.post("/prompt", json={"input": text, "session_id": "s1"})
        assert reply.status_code == 200, reply.text
    session = client.get("/sessions/s1").json()
    texts = [m["content"] for m in session["messages"] if m["role"] == "user"]
    assert texts[:2] == ["hello", "a refund please"]
    assert client.get("/sessions").json()["sessions"] == [{"session_id": "s1"}]
    assert client.delete("/sessions/s1").status_code == 204


def test_a_network_whose_agent_pauses_answers_409_like_a_paused_agent(live: Live) -> None:
    server = live({"desk": desk(pause=True)})
    client = server.client()
    reply = client.post("/prompt", json={"input": "a refund please"})
    assert reply.status_code == 409
    error = reply.json()["error"]
    assert error["type"] == "approval_required"
    assert "refund need(s) a person's approval" in error["message"]
    assert "agent 'billing' of a HandoffNetwork" in error["message"]
    with pytest.raises(openai.ConflictError, match="refund need"):
        sdk(server).chat.completions.create(
            model="desk", messages=[{"role": "user", "content": "a refund please"}]
        )


def test_the_openai_sdk_talks_to_a_network_a_supervisor_and_a_flow(live: Live) -> None:
    server = live({"team": team(Calls()), "desk": desk(), "shout": shouter()})
    client = sdk(server)
    assert [m.id for m in client.models.list()] == ["team", "desk", "shout"]

    conversation: list[Any] = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "I need a refund"},
        {"role": "assistant", "content": "Let me see."},
        {"role": "user", "content": "a refund now"},
    ]
    completion = client.chat.completions.create(model="desk", messages=conversation)
    # History and instructions reach the agent that answers (through the handoff).
    assert completion.choices[0].message.content == (
        "billing saw 'I need a refund'; rules: ['Be kind.']"
    )
    streamed = client.chat.completions.create(model="team", messages=conversation, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert text == "team: echo: a refund now (1 messages)"

    one = [{"role": "user", "content": "hey"}]
    shouted = client.chat.completions.create(model="shout", messages=one)  # type: ignore[arg-type]
    assert shouted.choices[0].message.content == "HEY!"
    streamed = client.chat.completions.create(model="shout", messages=one, stream=True)  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "HEY!"
    with pytest.raises(openai.BadRequestError, match="is a flow: send one user message") as bad:
        client.chat.completions.create(model="shout", messages=conversation)
    assert bad.value.body is not None and bad.value.body["param"] == "messages"  # type: ignore[index]


def test_anything_not_promptable_is_refused_by_name() -> None:
    with pytest.raises(BuilderError, match="'x' is a Calls, not an Agent or a flow"):
        create_app({"x": Calls()})  # type: ignore[dict-item]
    with pytest.raises(BuilderError, match="not Calls"):
        create_app(Calls())  # type: ignore[arg-type]
