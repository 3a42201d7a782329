"""An agent's ``tool_choice``: sent with each model call until the model calls a tool."""

from __future__ import annotations

from typing import Any

import pytest

from daimon import Agent, BuilderError, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.core import ToolSpec
from daimon.models import FunctionModel

from .test_resume import Crash, MemoryCheckpoint


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def obedient(seen: list[str | None], crash_after_tool: list[bool] | None = None) -> FunctionModel:
    """Calls the tool ``tool_choice`` names (``weather`` when one is required); answers with a
    tool's result, or in text when it may. ``crash_after_tool`` crashes once, after a result."""

    def model(request: ChatRequest) -> ChatResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL and crash_after_tool:
            crash_after_tool.pop()
            raise Crash
        seen.append(request.tool_choice)
        if last.role is Role.TOOL:
            return ChatResponse.reply(f"It is {last.text}.")
        choice = request.tool_choice
        if choice in (None, "auto", "none"):
            return ChatResponse.reply("no tool")
        called = "weather" if choice == "required" else choice
        return ChatResponse.tool_use(ToolCall(id="w1", name=called, arguments={"city": "Oslo"}))

    return FunctionModel(model)


@pytest.mark.parametrize("stream", [False, True], ids=["prompt", "prompt_stream"])
@pytest.mark.parametrize(
    ("choice", "seen", "answer"),
    [
        ("required", ["required", None], "It is sunny in Oslo."),
        ("weather", ["weather", None], "It is sunny in Oslo."),
        ("none", ["none"], "no tool"),
        (None, [None], "no tool"),
    ],
)
async def test_tool_choice_holds_until_the_model_calls_a_tool(
    stream: bool, choice: str | None, seen: list[str | None], answer: str
) -> None:
    requests: list[str | None] = []
    agent = Agent(obedient(requests), tools=[weather], tool_choice=choice)
    if stream:
        events = [event async for event in agent.prompt_stream("Weather in Oslo?")]
        text = events[-1].response.text  # type: ignore[attr-defined]
    else:
        text = (await agent.prompt("Weather in Oslo?")).text
    assert (requests, text) == (seen, answer)


async def test_a_run_resumed_after_its_tool_call_lets_the_model_choose() -> None:
    requests: list[str | None] = []
    checkpoint = MemoryCheckpoint()
    model = obedient(requests, crash_after_tool=[True])
    agent = Agent(model, tools=[weather], tool_choice="required", checkpoint=checkpoint)
    with pytest.raises(Crash):
        await agent.prompt("Weather in Oslo?", run_id="r1")
    response = await agent.prompt("Weather in Oslo?", run_id="r1")  # a new process, resuming
    assert response.text == "It is sunny in Oslo."
    assert requests == ["required", None]


async def test_a_named_client_tool_is_called_and_the_resumed_run_chooses_again() -> None:
    requests: list[str | None] = []
    locate = ToolSpec(
        name="locate", description="Where the user is.", parameters={"type": "object"}
    )
    agent = Agent(obedient(requests), tools=[weather], tool_choice="locate")
    agent.check_tool_choice([locate])
    paused = await agent.prompt("Weather here?", client_tools=[locate])
    assert [call.name for call in paused.client_calls] == ["locate"]
    done = await agent.resume(paused, results={"w1": "Oslo"})
    assert done.text == "It is Oslo."
    assert requests == ["locate", None]


@pytest.mark.parametrize("choice", [3, "", True])
def test_a_tool_choice_that_is_not_a_name_is_refused_at_construction(choice: Any) -> None:
    with pytest.raises(BuilderError, match="tool_choice must be 'auto', 'none', 'required'"):
        Agent(obedient([]), tool_choice=choice)


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        (
            [weather],
            "forecast",
            "tool_choice 'forecast' names no tool of the run; its tools: weather",
        ),
        ([], "required", "tool_choice 'required' asks for a tool call, but the run has no tools"),
    ],
)
async def test_a_tool_choice_the_tools_cannot_honour_is_refused_before_any_call(
    tools: list[Any], choice: str, message: str
) -> None:
    requests: list[str | None] = []
    agent = Agent(obedient(requests), tools=tools, tool_choice=choice)
    with pytest.raises(BuilderError) as checked:
        agent.check_tool_choice()
    with pytest.raises(BuilderError) as ran:
        await agent.prompt("Weather in Oslo?")
    assert str(checked.value) == str(ran.value) == message
    assert requests == []
    assert (
        Agent(obedient(requests), tools=tools, tool_choice="none").replace().tool_choice == "none"
    )
