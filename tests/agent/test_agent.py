"""Agent configuration, sessions, system prompts and concurrency."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daimon import Agent, BuilderError, ChatRequest, ChatResponse, DuplicateToolError, Role, tool
from daimon.memory import SlidingWindowMemory
from daimon.models import FunctionModel, ScriptedModel


@tool
def ping() -> str:
    """Ping."""
    return "pong"


def echo_model() -> FunctionModel:
    def respond(request: ChatRequest) -> ChatResponse:
        users = [m.text for m in request.messages if m.role is Role.USER]
        return ChatResponse.reply(" | ".join(users))

    return FunctionModel(respond)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": None}, "needs a model"),
        ({"model": object()}, "must be a Model"),
        ({"max_iterations": 0}, "max_iterations"),
        ({"max_iterations": -3}, "max_iterations"),
        ({"max_budget": -1.0}, "max_budget"),
        ({"max_budget": 1.0}, "cost_model"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"system_prompt": 42}, "system_prompt"),
        ({"examples": [("only one",)]}, "pairs"),
    ],
)
def test_bad_configuration_is_a_builder_error_at_construction(
    kwargs: dict[str, Any], message: str
) -> None:
    kwargs.setdefault("model", ScriptedModel([]))
    with pytest.raises(BuilderError, match=message):
        Agent(**kwargs)


def test_duplicate_tools_are_rejected_at_construction() -> None:
    @tool(name="ping")
    def other() -> str:
        """Another ping."""
        return "x"

    with pytest.raises(DuplicateToolError):
        Agent(ScriptedModel([]), tools=[ping, other])


async def test_sessions_keep_history_and_are_isolated() -> None:
    agent = Agent(echo_model(), memory=SlidingWindowMemory())
    await agent.prompt("one", session_id="a")
    await agent.prompt("uno", session_id="b")
    a = await agent.prompt("two", session_id="a")
    b = await agent.prompt("dos", session_id="b")
    assert a.text == "one | two"
    assert b.text == "uno | dos"
    assert a.session_id == "a"


async def test_without_a_session_each_prompt_is_fresh() -> None:
    agent = Agent(echo_model())
    await agent.prompt("one")
    assert (await agent.prompt("two")).text == "two"


async def test_default_memory_is_a_sliding_window_used_only_with_sessions() -> None:
    agent = Agent(echo_model())
    await agent.prompt("one", session_id="s")
    assert (await agent.prompt("two", session_id="s")).text == "one | two"
    assert isinstance(agent.memory, SlidingWindowMemory)


async def test_system_prompt_static_dynamic_and_examples() -> None:
    model = ScriptedModel(["a", "b"])
    await Agent(model, system_prompt="Be brief.", examples=[("hi", "hello")]).prompt("q")
    first = model.requests[0].messages
    assert [(m.role, m.text) for m in first] == [
        (Role.SYSTEM, "Be brief."),
        (Role.USER, "hi"),
        (Role.ASSISTANT, "hello"),
        (Role.USER, "q"),
    ]

    async def dynamic(state: Any) -> str:
        return f"You serve {state.deps['user']} in run {state.run_id}."

    await Agent(model, system_prompt=dynamic).prompt("q", deps={"user": "ada"}, run_id="r9")
    assert model.requests[1].messages[0].text == "You serve ada in run r9."


async def test_one_agent_serves_many_concurrent_prompts() -> None:
    async def respond(request: ChatRequest) -> ChatResponse:
        await asyncio.sleep(0.01)
        return ChatResponse.reply(request.messages[-1].text.upper())

    agent = Agent(FunctionModel(respond))
    answers = await asyncio.gather(*(agent.prompt(f"p{i}") for i in range(200)))
    assert [a.text for a in answers] == [f"P{i}" for i in range(200)]
    assert len({a.run_id for a in answers}) == 200


async def test_model_settings_temperature_and_max_tokens_reach_the_model() -> None:
    model = ScriptedModel(["x"])
    agent = Agent(model, temperature=0.2, max_tokens=64, model_settings={"top_p": 0.9})
    await agent.prompt("q")
    request = model.requests[0]
    assert (request.temperature, request.max_tokens, dict(request.settings)) == (
        0.2,
        64,
        {"top_p": 0.9},
    )


async def test_replace_copies_the_configuration_with_changes_and_validates_them() -> None:
    base = Agent(ScriptedModel(["a"]), name="base", system_prompt="Be kind.", tools=[ping],
                 max_iterations=3, examples=[("hi", "hello")])  # fmt: skip
    memory = SlidingWindowMemory()
    copy = base.replace(name="copy", memory=memory)
    assert (copy.name, copy.system_prompt, copy.max_iterations) == ("copy", "Be kind.", 3)
    assert copy.memory is memory and base.memory is not memory
    assert copy.tools.names == ("ping",) and copy.examples == base.examples
    with pytest.raises(BuilderError, match="max_iterations"):
        base.replace(max_iterations=0)
    with pytest.raises(BuilderError, match="no setting"):
        base.replace(colour="red")


# ---------------------------------------------------------------- media and prompt caching
class CachingModel(ScriptedModel):
    """A scripted model that says it caches prompts, as the hosted providers' models do."""

    __slots__ = ()
    prompt_cache = "auto"


async def test_a_tool_returning_an_image_shows_it_to_the_model() -> None:
    from daimon import ImagePart, TextPart, ToolCall

    @tool
    def snapshot() -> list[object]:
        """Take a picture."""
        return [TextPart(text="the view"), ImagePart(data=b"\x89PNG", media_type="image/png")]

    model = ScriptedModel(
        [
            ChatResponse.tool_use(ToolCall(id="c1", name="snapshot", arguments={})),
            ChatResponse.reply("a view"),
        ]
    )
    result = await Agent(model, tools=[snapshot]).prompt("look")
    assert result.text == "a view"
    (sent,) = [m for m in model.requests[1].messages if m.role is Role.TOOL]
    assert sent.content == (
        TextPart(text="the view"),
        ImagePart(data=b"\x89PNG", media_type="image/png"),
    )


async def test_a_changing_system_prompt_warns_once_when_the_model_caches() -> None:
    from daimon.agent import PromptCacheWarning

    runs = iter(range(10))
    model = CachingModel([ChatResponse.reply("ok")] * 3)
    agent = Agent(model, name="clock", system_prompt=lambda state: f"Run {next(runs)}.")
    await agent.prompt("a")
    with pytest.warns(PromptCacheWarning, match="agent 'clock': the system prompt changed"):
        await agent.prompt("b")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await agent.prompt("c")  # warned once already


async def test_no_warning_for_a_stable_prompt_or_a_model_without_caching() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stable = Agent(
            CachingModel([ChatResponse.reply("ok")] * 2), system_prompt=lambda s: "Same."
        )
        await stable.prompt("a")
        await stable.prompt("b")
        runs = iter(range(10))
        plain = Agent(
            ScriptedModel([ChatResponse.reply("ok")] * 2),
            system_prompt=lambda s: f"Run {next(runs)}.",
        )
        await plain.prompt("a")
        await plain.prompt("b")
