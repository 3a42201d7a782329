from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daimon.core import BuilderError, CancelToken, PromptTemplateError, RunCancelled, Usage
from daimon.orchestration import (
    AgentStep,
    Chain,
    ChainContext,
    NodeError,
    OrchestrationBuildError,
    TransformStep,
)


async def shout(value: str) -> str:
    await asyncio.sleep(0)
    return value.upper()


async def test_steps_run_in_order_and_results_become_the_value() -> None:
    seen: list[Any] = []

    async def remember(ctx: ChainContext) -> None:
        seen.append(ctx.value)
        ctx.values["first"] = ctx.value

    chain = Chain(
        [TransformStep(str.strip), remember, TransformStep(shout), lambda ctx: ctx.value + "!"]
    )
    result = await chain.run("  hi ")

    assert result.value == "HI!"
    assert seen == ["hi"]
    assert result.values == {"first": "hi"}
    assert [t.name for t in result.timings] == ["strip", "remember", "shout", "<lambda>"]
    assert all(t.seconds >= 0 for t in result.timings)
    assert result.usage == Usage() and result.cost == 0.0


async def test_a_transform_can_set_the_value_to_none_but_a_plain_step_cannot() -> None:
    result = await Chain([TransformStep(lambda v: None)]).run("x")
    assert result.value is None
    result = await Chain([lambda ctx: None]).run("x")
    assert result.value == "x"


async def test_agent_steps_use_keys_and_templates_and_roll_up_usage(fake_agent: Any) -> None:
    writer = fake_agent(lambda text: f"draft({text})", tokens=10, cost=0.25, name="writer")
    editor = fake_agent(lambda text: f"edit({text})", tokens=4, cost=0.5, name="editor")
    chain = Chain(
        [
            AgentStep(writer, output_key="draft"),
            TransformStep(len),
            AgentStep(
                editor,
                input_key="draft",
                prompt_template="Polish {{ input }} for {{audience}} ({{draft}}), not \\{{x}}",
            ),
        ]
    )
    token = CancelToken()
    result = await chain.run("topic", values={"audience": "kids"}, cancel=token)

    assert writer.prompts == ["topic"]
    assert editor.prompts == ["Polish draft(topic) for kids (draft(topic)), not {{x}}"]
    assert result.value == "edit(Polish draft(topic) for kids (draft(topic)), not {{x}})"
    assert result.values["draft"] == "draft(topic)"
    assert result.usage == Usage(input_tokens=14, output_tokens=7, requests=2)
    assert result.cost == pytest.approx(0.75)
    assert writer.cancels == [token] and editor.cancels == [token]
    assert [t.name for t in result.timings] == ["writer", "len", "editor"]


async def test_an_agent_given_directly_is_an_agent_step(fake_agent: Any) -> None:
    agent = fake_agent()
    result = await Chain([agent, agent]).run(3)
    assert agent.prompts == ["3", "<3>"]
    assert result.value == "<<3>>"


async def test_a_missing_input_key_names_the_step(fake_agent: Any) -> None:
    chain = Chain([AgentStep(fake_agent(), input_key="nope", name="ask")])
    with pytest.raises(NodeError, match="step 'ask' failed: KeyError") as caught:
        await chain.run("x", values={"other": 1})
    assert caught.value.node == "ask"
    assert isinstance(caught.value.__cause__, KeyError)


async def test_a_template_variable_without_a_value_fails_the_step(fake_agent: Any) -> None:
    chain = Chain([AgentStep(fake_agent(), prompt_template="{{input}} {{missing}}")])
    with pytest.raises(NodeError) as caught:
        await chain.run("x")
    assert isinstance(caught.value.__cause__, PromptTemplateError)
    assert caught.value.__cause__.missing == ("missing",)


async def test_a_failing_step_stops_the_chain_and_is_named() -> None:
    ran: list[str] = []

    def explode(ctx: ChainContext) -> None:
        raise ValueError("bad input")

    chain = Chain([explode, lambda ctx: ran.append("after")])
    with pytest.raises(NodeError, match="step 'explode' failed: ValueError: bad input") as caught:
        await chain.run(1)
    assert isinstance(caught.value.__cause__, ValueError)
    assert ran == []


async def test_cancel_is_checked_before_each_step() -> None:
    token = CancelToken()
    ran: list[str] = []

    def first(ctx: ChainContext) -> None:
        ran.append("first")
        token.cancel("enough")

    chain = Chain([first, lambda ctx: ran.append("second")])
    with pytest.raises(RunCancelled, match="enough"):
        await chain.run(None, cancel=token)
    assert ran == ["first"]

    with pytest.raises(RunCancelled):
        await chain.run(None, cancel=token)
    assert ran == ["first"]


async def test_chains_nest_and_extend() -> None:
    inner = Chain([TransformStep(lambda v: v + 1)], name="inner")
    outer = inner.then(inner, TransformStep(lambda v: v * 10))
    result = await outer.run(1)
    assert result.value == 30
    assert [t.name for t in result.timings] == ["<lambda>", "inner", "<lambda>"]
    assert len(inner.steps) == 1


def test_bad_chains_are_refused_when_built() -> None:
    with pytest.raises(OrchestrationBuildError, match="has no steps") as caught:
        Chain([])
    assert isinstance(caught.value, BuilderError)
    with pytest.raises(OrchestrationBuildError, match="step 1 must be callable"):
        Chain([TransformStep(str), 42])  # type: ignore[list-item]
    with pytest.raises(OrchestrationBuildError, match="async prompt"):
        AgentStep(object())  # type: ignore[arg-type]
    with pytest.raises(OrchestrationBuildError, match="needs a callable"):
        TransformStep("nope")  # type: ignore[arg-type]


async def test_a_step_returning_an_agent_response_is_counted(fake_agent: Any) -> None:
    agent = fake_agent(tokens=8, cost=0.5)

    async def ask(ctx: ChainContext) -> Any:
        return await agent.prompt(str(ctx.value))

    result = await Chain([ask, TransformStep(lambda response: response.text)]).run("x")
    assert result.value == "<x>"
    assert result.usage == Usage(input_tokens=8, output_tokens=4, requests=1)
    assert result.cost == pytest.approx(0.5)
