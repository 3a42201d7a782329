"""Client tools: the model calls them, the run pauses, the caller runs them and resumes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from daimon import (
    Agent,
    ApprovalDecision,
    ChatRequest,
    ChatResponse,
    ClientToolError,
    Role,
    ToolCall,
    ToolOutput,
    ToolSpec,
    tool,
)
from daimon.core import codec
from daimon.core.events import Done, ToolCallStart
from daimon.core.results import AgentResponse
from daimon.models import FunctionModel

ran: Counter[str] = Counter()

LOCATE = ToolSpec(
    name="get_location",
    description="The user's location, from their browser.",
    parameters={"type": "object", "properties": {"precise": {"type": "boolean"}}},
)


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    ran[city] += 1
    return f"sunny in {city}"


@tool(requires_approval=True)
def book(city: str) -> str:
    """Book a trip."""
    ran["book"] += 1
    return f"booked {city}"


def mixed(request: ChatRequest) -> ChatResponse:
    """Asks for the weather (server) and the location (client) in one turn, then answers."""
    results = [m for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(
            ToolCall(id="w", name="weather", arguments={"city": "Oslo"}),
            ToolCall(id="loc", name="get_location", arguments={"precise": True}),
        )
    return ChatResponse.reply(" | ".join(m.text for m in results))


@pytest.fixture(autouse=True)
def reset() -> None:
    ran.clear()


def seen_tools(log: list[ChatRequest]) -> list[str]:
    return [spec.name for spec in log[0].tools]


async def test_a_mixed_turn_runs_the_server_tool_and_pauses_for_the_client_one() -> None:
    log: list[ChatRequest] = []

    def model(request: ChatRequest) -> ChatResponse:
        log.append(request)
        return mixed(request)

    agent = Agent(FunctionModel(model), tools=[weather])
    paused = await agent.prompt("weather here?", client_tools=[LOCATE])
    assert seen_tools(log) == ["weather", "get_location"]
    assert paused.paused and not paused.pending_approvals
    assert [(c.id, c.name, c.arguments) for c in paused.client_calls] == [
        ("loc", "get_location", {"precise": True})
    ]
    assert ran == Counter({"Oslo": 1})  # the server's tool ran already

    paused = codec.loads(codec.dumps(paused), AgentResponse)  # survives JSON, client tools too
    done = await agent.resume(paused, results={"loc": "Oslo, Norway"})
    assert not done.paused and done.text == "sunny in Oslo | Oslo, Norway"
    assert ran == Counter({"Oslo": 1})  # not run twice
    assert [spec.name for spec in log[-1].tools] == ["weather", "get_location"]


async def test_an_error_result_reaches_the_model_as_an_error() -> None:
    seen: list[bool] = []

    def model(request: ChatRequest) -> ChatResponse:
        tools = [m for m in request.messages if m.role is Role.TOOL]
        if not tools:
            return ChatResponse.tool_use(ToolCall(id="c1", name="get_location", arguments={}))
        seen.append(tools[0].is_error)
        return ChatResponse.reply(tools[0].text)

    agent = Agent(FunctionModel(model))
    paused = await agent.prompt("where?", client_tools=[LOCATE])
    done = await agent.resume(paused, results={"c1": ToolOutput.error("denied by the user")})
    assert done.text == "denied by the user" and seen == [True]


async def test_approvals_and_client_calls_pause_together_and_resume_in_parts() -> None:
    def model(request: ChatRequest) -> ChatResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        if not results:
            return ChatResponse.tool_use(
                ToolCall(id="b", name="book", arguments={"city": "Rome"}),
                ToolCall(id="loc", name="get_location", arguments={}),
            )
        return ChatResponse.reply(" | ".join(m.text for m in results))

    agent = Agent(FunctionModel(model), tools=[book])
    paused = await agent.prompt("go", client_tools=[LOCATE])
    assert [a.id for a in paused.pending_approvals] == ["b"]
    assert [c.id for c in paused.client_calls] == ["loc"]
    half = await agent.resume(paused, {"b": ApprovalDecision.approve()})
    assert (
        half.paused and not half.pending_approvals and [c.id for c in half.client_calls] == ["loc"]
    )
    done = await agent.resume(half, results={"loc": "Rome"})
    assert done.text == "booked Rome | Rome" and ran == Counter({"book": 1})


async def test_the_stream_shows_the_client_call_and_ends_paused() -> None:
    agent = Agent(FunctionModel(mixed), tools=[weather])
    events = [e async for e in agent.prompt_stream("weather?", client_tools=[LOCATE])]
    starts = [e.name for e in events if isinstance(e, ToolCallStart)]
    assert starts == ["weather", "get_location"]
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert [c.id for c in done.response.client_calls] == ["loc"]


async def test_a_run_without_client_calls_is_untouched() -> None:
    agent = Agent(FunctionModel(lambda r: ChatResponse.reply("hi")))
    done = await agent.prompt("hello", client_tools=[LOCATE])
    assert done.text == "hi" and not done.paused and done.client_calls == ()


async def test_a_result_for_an_unknown_call_id_is_refused() -> None:
    agent = Agent(FunctionModel(mixed), tools=[weather])
    paused = await agent.prompt("weather?", client_tools=[LOCATE])
    with pytest.raises(ClientToolError, match=r"unknown client tool call id\(s\) \['nope'\]"):
        await agent.resume(paused, results={"nope": "x"})
    with pytest.raises(ClientToolError, match="no client tools"):
        await Agent(FunctionModel(mixed), tools=[weather]).resume(
            _without_client_tools(paused), results={"loc": "x"}
        )


def _without_client_tools(paused: AgentResponse[Any]) -> AgentResponse[Any]:
    import dataclasses

    assert paused.state is not None
    state = dataclasses.replace(paused.state, custom={})
    return dataclasses.replace(paused, state=state)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ToolSpec(name="weather", description="", parameters={"type": "object"}), "clashes"),
        (ToolSpec(name="bad name", description="", parameters={"type": "object"}), "ASCII"),
        (ToolSpec(name="x", description="", parameters={"type": "array"}), "type 'object'"),
        (
            ToolSpec(name="x", description="", parameters={"type": "object", "required": 3}),
            "no valid schema",
        ),
    ],
)
async def test_bad_client_tools_are_refused_before_the_run(spec: ToolSpec, message: str) -> None:
    calls: list[ChatRequest] = []

    def model(request: ChatRequest) -> ChatResponse:
        calls.append(request)
        return ChatResponse.reply("x")

    agent = Agent(FunctionModel(model), tools=[weather])
    with pytest.raises(ClientToolError, match=message):
        await agent.prompt("hi", client_tools=[spec])
    assert calls == []


async def test_a_client_tool_given_twice_is_refused() -> None:
    agent = Agent(FunctionModel(lambda r: ChatResponse.reply("x")))
    with pytest.raises(ClientToolError, match="twice"):
        await agent.prompt("hi", client_tools=[LOCATE, LOCATE])


async def test_resume_stream_streams_the_rest_of_the_run() -> None:
    agent = Agent(FunctionModel(mixed), tools=[weather])
    paused = await agent.prompt("weather?", client_tools=[LOCATE])
    events = [e async for e in agent.resume_stream(paused, results={"loc": "Bergen"})]
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text == "sunny in Oslo | Bergen"
