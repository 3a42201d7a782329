"""A run's answer, and what a prompt can pass besides its input: history, instructions, deps."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from daimon import Agent, BuilderError, ChatRequest, ChatResponse, Message, RunContext, tool
from daimon.core import CancelToken, RunCancelled
from daimon.memory import SlidingWindowMemory
from daimon.models import FunctionModel, ScriptedModel


@dataclass
class City:
    name: str


def echo_conversation(request: ChatRequest) -> ChatResponse:
    return ChatResponse.reply(" | ".join(f"{m.role.value}:{m.text}" for m in request.messages))


def test_a_text_agents_output_is_its_text() -> None:
    response = Agent(ScriptedModel(["Paris."])).prompt_sync("Capital of France?")
    assert response.output == response.text == "Paris."


def test_a_typed_agents_output_is_an_instance_of_its_type() -> None:
    agent = Agent(ScriptedModel(['{"name": "Paris"}']), output_type=City)
    assert agent.prompt_sync("Where is the Louvre?").output == City(name="Paris")


async def test_history_is_the_conversation_before_the_prompt() -> None:
    agent = Agent(FunctionModel(echo_conversation), system_prompt="Be brief.")
    history = [Message.user("My name is Ada."), Message.assistant("Hello Ada.")]
    response = await agent.prompt("Who am I?", history=history)
    assert response.text == (
        "system:Be brief. | user:My name is Ada. | assistant:Hello Ada. | user:Who am I?"
    )
    # the run's own messages start at its prompt; the history is not repeated in them
    assert response.messages[0].text == "Who am I?"
    assert history == [Message.user("My name is Ada."), Message.assistant("Hello Ada.")]


async def test_history_and_a_session_cannot_both_be_given() -> None:
    memory = SlidingWindowMemory()
    agent = Agent(FunctionModel(echo_conversation), memory=memory)
    with pytest.raises(BuilderError, match="not both"):
        await agent.prompt("hi", history=[Message.user("before")], session_id="s")
    assert await memory.list_sessions() == []


async def test_instructions_join_the_system_prompt_for_one_run() -> None:
    agent = Agent(FunctionModel(echo_conversation), system_prompt="Be brief.")
    once = await agent.prompt("hi", instructions="Answer in French.")
    assert once.text == "system:Be brief.\n\nAnswer in French. | user:hi"
    assert (await agent.prompt("hi")).text == "system:Be brief. | user:hi"
    bare = Agent(FunctionModel(echo_conversation))
    assert (
        await bare.prompt("hi", instructions="Only this.")
    ).text == "system:Only this. | user:hi"


@dataclass
class Deps:
    greeting: str


@tool
def greet(ctx: RunContext[Deps], name: str) -> str:
    """Greet someone."""
    return f"{ctx.deps.greeting}, {name}"


async def test_deps_of_the_declared_type_reach_the_tools_and_others_are_refused() -> None:
    def model(request: ChatRequest) -> ChatResponse:
        results = [m.text for m in request.messages if m.tool_call_id]
        if results:
            return ChatResponse.reply(results[0])
        from daimon import ToolCall

        return ChatResponse.tool_use(ToolCall(id="1", name="greet", arguments={"name": "Ada"}))

    agent = Agent(FunctionModel(model), tools=[greet], deps_type=Deps)
    assert (await agent.prompt("hi", deps=Deps("Hello"))).text == "Hello, Ada"
    with pytest.raises(BuilderError, match="takes deps of type Deps, got str"):
        await agent.prompt("hi", deps="Hello")  # type: ignore[arg-type]


def test_prompt_sync_takes_a_cancel_token() -> None:
    token = CancelToken()
    token.cancel("no longer needed")
    with pytest.raises(RunCancelled, match="no longer needed"):
        Agent(ScriptedModel(["x"])).prompt_sync("hi", cancel=token)


def test_replace_keeps_every_setting_it_is_not_given() -> None:
    agent = Agent(
        ScriptedModel(["x"]),
        name="a",
        system_prompt="s",
        examples=[("q", "a")],
        output_type=City,
        max_iterations=4,
        deps_type=Deps,
    )
    other = agent.replace(name="b")
    assert (other.name, other.system_prompt, other.max_iterations) == ("b", "s", 4)
    assert other.examples == agent.examples and other.deps_type is Deps
    assert other.output is not None and other.output.output_type is City
    with pytest.raises(BuilderError, match="no setting"):
        agent.replace(colour="red")
