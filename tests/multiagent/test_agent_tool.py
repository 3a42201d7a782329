"""AgentTool: an agent as a tool, with isolation, roll-up of usage and cost, and failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daimon import (
    Agent,
    AgentHook,
    CancelToken,
    ChatRequest,
    ChatResponse,
    ModelPrice,
    PriceTable,
    Role,
    RunCancelled,
    RunContext,
    RunState,
    ToolCall,
    tool,
)
from daimon.core import BuilderError
from daimon.models import FunctionModel, ScriptedModel
from daimon.multiagent import AgentTool, Supervisor
from daimon.orchestration import NodeContext, Workflow, WorkflowBuilder, workflow_node
from daimon.tools import Tool

from .support import PRICES, calls, other_tasks, reply, requests_of, scripted, used


def research_tool(agent: Agent, **options: Any) -> AgentTool:
    return AgentTool(agent, name="research", description="Finds facts.", **options)


async def test_the_parent_gets_the_answer_and_the_sub_agents_usage_and_cost() -> None:
    sub = scripted(reply("owls hunt at night", 5, 3), name="researcher")
    parent = scripted(
        calls(("research", {"task": "when do owls hunt?"}), input_tokens=10, output_tokens=2),
        reply("At night.", 20, 4),
        tools=[research_tool(sub)],
    )
    response = await parent.prompt("Tell me about owls")

    assert response.text == "At night."
    tool_message = requests_of(parent)[1].messages[-1]
    assert (tool_message.role, tool_message.text) == (Role.TOOL, "owls hunt at night")
    assert not tool_message.is_error
    # parent 10+20 in, 2+4 out; sub 5 in, 3 out; each token is $1 in and $2 out
    assert (response.usage.input_tokens, response.usage.output_tokens) == (35, 9)
    assert response.usage.requests == 3
    assert response.cost == pytest.approx(35 + 2 * 9)


async def test_the_sub_agent_sees_only_its_task() -> None:
    sub = scripted(reply("done"), name="researcher", system_prompt="You research.")
    parent = scripted(
        calls(("research", {"task": "find X"})),
        reply("ok"),
        tools=[research_tool(sub)],
        system_prompt="You lead.",
    )
    await parent.prompt("the user's secret question")
    [request] = requests_of(sub)
    assert [(m.role, m.text) for m in request.messages] == [
        (Role.SYSTEM, "You research."),
        (Role.USER, "find X"),
    ]


async def test_the_tool_describes_a_task_argument_by_default() -> None:
    agent_tool = research_tool(scripted("x"))
    assert isinstance(agent_tool, Tool)
    assert agent_tool.name == "research"
    assert agent_tool.description == "Finds facts."
    assert agent_tool.parameters_schema["required"] == ["task"]
    assert agent_tool.parameters_schema["properties"]["task"]["type"] == "string"


async def test_a_custom_input_schema_sends_the_arguments_as_json() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    }
    sub = scripted(reply("sunny"))
    parent = scripted(
        calls(("forecast", {"city": "Oslo", "days": 2})),
        reply("It will be sunny."),
        tools=[AgentTool(sub, name="forecast", description="Weather.", input_schema=schema)],
    )
    await parent.prompt("weather?")
    assert requests_of(sub)[0].messages[-1].text == '{"city": "Oslo", "days": 2}'
    assert requests_of(parent)[0].tools[0].parameters == schema


async def test_deps_and_the_cancel_token_reach_the_sub_agents_tools() -> None:
    seen: list[tuple[Any, CancelToken]] = []

    @tool
    def lookup(ctx: RunContext[dict[str, str]]) -> str:
        """Look up."""
        seen.append((ctx.deps, ctx.cancel))
        return "found"

    sub = scripted(calls(("lookup", {})), reply("found it"), tools=[lookup])
    parent = scripted(calls(("research", {"task": "t"})), reply("ok"), tools=[research_tool(sub)])
    token = CancelToken()
    deps = {"db": "prod"}
    await parent.prompt("go", deps=deps, cancel=token)
    assert seen == [(deps, token)]


async def test_without_a_session_each_call_is_a_fresh_conversation() -> None:
    sub = scripted(reply("first"), reply("second"))
    parent = scripted(
        calls(("research", {"task": "one"})),
        calls(("research", {"task": "two"})),
        reply("ok"),
        tools=[research_tool(sub)],
    )
    await parent.prompt("go", session_id="user-1")
    assert [m.text for m in requests_of(sub)[1].messages] == ["two"]


async def test_a_session_keeps_the_sub_agents_conversation_across_calls() -> None:
    sub = scripted(reply("first"), reply("second"))
    agent_tool = research_tool(sub, session_id=lambda ctx: f"{ctx.session_id}:research")
    parent = scripted(
        calls(("research", {"task": "one"})),
        calls(("research", {"task": "two"})),
        reply("ok"),
        tools=[agent_tool],
    )
    await parent.prompt("go", session_id="user-1")
    assert [m.text for m in requests_of(sub)[1].messages] == ["one", "first", "two"]
    assert [m.text for m in await sub.memory.get_messages("user-1:research")][-1] == "second"


async def test_a_failing_sub_agent_is_an_error_result_naming_it_and_the_parent_goes_on() -> None:
    sub = scripted(name="researcher")  # no scripted answers: its first model call fails
    parent = scripted(
        calls(("research", {"task": "t"})), reply("Sorry, research failed."),
        tools=[research_tool(sub)],
    )  # fmt: skip
    response = await parent.prompt("go")
    assert response.text == "Sorry, research failed."
    tool_message = requests_of(parent)[1].messages[-1]
    assert tool_message.is_error
    assert tool_message.text.startswith("Error: agent 'research' failed: ModelError: ")
    assert "ran out of responses" in tool_message.text


async def test_a_failing_sub_agent_still_reports_what_it_spent() -> None:
    def flaky(request: ChatRequest) -> ChatResponse:
        if len(request.messages) == 1:
            return ChatResponse.tool_use(
                ToolCall(id="n", name="note", arguments={}), usage=used(7, 1), model="m"
            )
        raise RuntimeError("provider exploded")

    @tool
    def note() -> str:
        """Take a note."""
        return "noted"

    sub = Agent(FunctionModel(flaky, model_name="m"), tools=[note], cost_model=PRICES)
    parent = scripted(
        calls(("research", {"task": "t"}), input_tokens=1, output_tokens=1),
        reply("gave up", 1, 1),
        tools=[research_tool(sub)],
    )
    response = await parent.prompt("go")
    assert "RuntimeError: provider exploded" in requests_of(parent)[1].messages[-1].text
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 3)
    assert response.cost == pytest.approx(9 + 2 * 3)


async def test_a_sub_agent_that_needs_approval_is_an_error_result() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund money."""
        ran.append("refund")
        return "refunded"

    sub = scripted(calls(("refund", {"amount": 5})), reply("done"), tools=[refund])
    parent = scripted(calls(("research", {"task": "t"})), reply("ok"), tools=[research_tool(sub)])
    await parent.prompt("go")
    message = requests_of(parent)[1].messages[-1]
    assert message.is_error
    assert "the run paused: refund need(s) a person's approval" in message.text
    assert ran == []


CHEAP_INPUT = PriceTable({"m": ModelPrice(input=1_000, output=2_000_000)}, as_of="2025-01-01")
"""$0.001 per input token (a reservation's input allowance stays small) and $2 per output token."""


async def test_the_sub_agent_spends_from_the_parents_budget() -> None:
    # The parent's calls cost $2 each; the sub-agent's answer costs $20, and it reserves a little
    # more (its 10 output tokens, plus its input at a token a byte).
    def family(budget: float) -> tuple[Agent, Agent]:
        sub = Agent(
            ScriptedModel([reply("fact", 0, 10)], model_name="m"),
            cost_model=CHEAP_INPUT,
            max_tokens=10,
        )
        parent = scripted(
            calls(("research", {"task": "t"}), input_tokens=0, output_tokens=1),
            reply("done", 0, 1),
            tools=[research_tool(sub)],
            max_tokens=1,
            max_budget=budget,
        )
        return parent.replace(cost_model=CHEAP_INPUT), sub

    parent, sub = family(100.0)
    assert (await parent.prompt("go")).cost == pytest.approx(2 + 20 + 2)
    # $18 left after the parent's first call: too little for the sub-agent's worst case, so it
    # makes no call, and the parent's model reads why.
    parent, sub = family(20.0)
    response = await parent.prompt("go")
    assert (response.text, response.cost) == ("done", pytest.approx(4.0))
    assert requests_of(sub) == []
    refusal = requests_of(parent)[1].messages[-1]
    assert refusal.is_error and "BudgetExceededError" in refusal.text
    assert "the $20.000000 limit" in refusal.text
    assert "the limit is that of a run that started this one" in refusal.text


async def test_parallel_sub_agents_share_what_the_parent_has_left() -> None:
    # Each sub-agent reserves just over $20 and spends $20: with $50, two fit and the third is
    # refused, although none has spent anything yet when the third starts.
    started: list[str] = []
    two_started = asyncio.Event()
    release = asyncio.Event()

    async def answer(request: ChatRequest) -> ChatResponse:
        started.append(request.messages[-1].text)
        if len(started) == 2:
            two_started.set()
        await release.wait()
        return reply("fact", 0, 10)

    async def release_when_two_wait() -> None:
        await two_started.wait()
        for _ in range(10):  # time for a third to start, were it allowed to
            await asyncio.sleep(0)
        release.set()

    sub = Agent(FunctionModel(answer, model_name="m"), cost_model=CHEAP_INPUT, max_tokens=10)
    parent = scripted(
        calls(*[("research", {"task": "t"})] * 3, input_tokens=0, output_tokens=0),
        reply("done", 0, 0),
        tools=[research_tool(sub)],
        max_tokens=1,
        max_budget=50.0,
    ).replace(cost_model=CHEAP_INPUT)
    releaser = asyncio.create_task(release_when_two_wait())
    response = await parent.prompt("go")
    await releaser
    assert len(started) == 2
    assert response.cost == pytest.approx(40.0)
    results = [m for m in requests_of(parent)[1].messages if m.role == "tool"]
    assert sorted(m.is_error for m in results) == [False, False, True]


async def test_cancelling_the_parent_stops_the_sub_agent_at_once() -> None:
    started = asyncio.Event()
    stopped: list[str] = []

    async def stuck(request: ChatRequest) -> ChatResponse:
        started.set()
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            stopped.append("sub-agent model call")
            raise
        raise AssertionError("unreachable")

    sub = Agent(FunctionModel(stuck))
    parent = scripted(calls(("research", {"task": "t"})), reply("x"), tools=[research_tool(sub)])
    token = CancelToken()

    async def cancel_once_started() -> None:
        await started.wait()
        token.cancel("user left")

    canceller = asyncio.create_task(cancel_once_started())
    with pytest.raises(RunCancelled, match="user left"):
        await parent.prompt("go", cancel=token)
    await canceller
    assert stopped == ["sub-agent model call"]
    assert other_tasks() == set()
    # no cancellation request is left on the caller's task to hit its next await
    this = asyncio.current_task()
    assert this is not None and this.cancelling() == 0
    await asyncio.sleep(0)


async def test_a_sub_agents_tool_cancelling_the_token_cancels_the_parent() -> None:
    @tool
    def stop(ctx: RunContext[None]) -> str:
        """Stop everything."""
        ctx.cancel.cancel("enough")
        return "stopping"

    sub = scripted(calls(("stop", {})), reply("never"), tools=[stop])
    parent = scripted(calls(("research", {"task": "t"})), reply("x"), tools=[research_tool(sub)])
    with pytest.raises(RunCancelled, match="enough"):
        await parent.prompt("go", cancel=CancelToken())
    assert len(requests_of(parent)) == len(requests_of(sub)) == 1
    this = asyncio.current_task()
    assert this is not None and this.cancelling() == 0


async def test_a_sub_agent_raising_run_cancelled_by_itself_is_a_failure() -> None:
    @tool
    def quit_() -> str:
        """Give up."""
        raise RunCancelled("tool gave up")

    sub = scripted(calls(("quit_", {})), reply("never"), tools=[quit_])
    parent = scripted(calls(("research", {"task": "t"})), reply("ok"), tools=[research_tool(sub)])
    assert (await parent.prompt("go")).text == "ok"
    error = requests_of(parent)[1].messages[-1]
    assert error.is_error and "RunCancelled" in error.text


async def test_a_sub_agent_with_an_output_type_answers_with_json() -> None:
    from dataclasses import dataclass

    @dataclass
    class Fact:
        claim: str
        confidence: float

    sub = scripted(
        calls(("final_result", {"claim": "owls hunt at night", "confidence": 0.9})),
        output_type=Fact,
    )
    parent = scripted(calls(("research", {"task": "t"})), reply("ok"), tools=[research_tool(sub)])
    await parent.prompt("go")
    result = requests_of(parent)[1].messages[-1]
    assert not result.is_error
    assert result.text == '{"claim":"owls hunt at night","confidence":0.9}'


async def test_a_cancelled_sub_agents_spending_still_reaches_the_parent() -> None:
    reached = asyncio.Event()
    seen: list[float] = []

    @tool
    async def wait() -> str:
        """Waits forever."""
        reached.set()
        await asyncio.Event().wait()
        return "never"

    class LastCost(AgentHook):
        async def on_error(self, error: BaseException, state: RunState) -> None:
            seen.append(state.cost)

    sub = scripted(calls(("wait", {}), input_tokens=2, output_tokens=1), tools=[wait])  # $4
    parent = scripted(
        calls(("research", {"task": "t"}), input_tokens=1, output_tokens=0),  # $1
        tools=[research_tool(sub)],
        hooks=[LastCost()],
    )
    run = asyncio.create_task(parent.prompt("go"))
    await reached.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert seen == [pytest.approx(5.0)]


async def test_a_supervisor_as_a_sub_agent_answers_and_its_teams_usage_reaches_the_parent() -> None:
    worker = scripted(reply("owls hunt at night", 5, 3), name="worker")
    lead = Supervisor(
        ScriptedModel(
            [
                calls(("delegate", {"agent": "worker", "task": "owls?"}), input_tokens=2),
                reply("the team says: at night", 3, 1),
            ],
            model_name="m",
        ),
        {"worker": worker},
        cost_model=PRICES,
    )
    parent = scripted(
        calls(("research", {"task": "when do owls hunt?"})),
        reply("At night."),
        tools=[AgentTool(lead, name="research", description="A research team.")],
    )
    response = await parent.prompt("Tell me about owls")
    tool_message = requests_of(parent)[1].messages[-1]
    assert (tool_message.text, tool_message.is_error) == ("the team says: at night", False)
    # parent 1+1 in, 1+1 out; lead 2+3 in, 1+1 out; worker 5 in, 3 out
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 7)
    assert response.usage.requests == 5
    assert response.cost == pytest.approx(12 + 2 * 7)


def _asking(agent: Agent, name: str = "flow") -> Workflow:
    async def ask(ctx: NodeContext, text: str) -> str:
        return (await ctx.prompt(agent, text)).text.upper()

    return (
        WorkflowBuilder(name, inputs={"text": str})
        .add(workflow_node(output="answer")(ask), name="ask")
        .build()
    )


async def test_a_workflow_as_a_sub_agent_gets_the_task_and_answers_with_its_output() -> None:
    inner = scripted(reply("owls hunt at night", 5, 3), name="inner")
    parent = scripted(
        calls(("research", {"task": "owls?"})),
        reply("At night."),
        tools=[AgentTool(_asking(inner), name="research", description="A research flow.")],
    )
    response = await parent.prompt("Tell me about owls")
    tool_message = requests_of(parent)[1].messages[-1]
    assert (tool_message.text, tool_message.is_error) == ("OWLS HUNT AT NIGHT", False)
    assert [m.text for m in requests_of(inner)[0].messages] == ["owls?"]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 5)


async def test_a_flow_whose_agent_pauses_is_an_error_result_naming_the_node() -> None:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund money."""
        return "refunded"

    inner = scripted(calls(("refund", {"amount": 5})), tools=[refund], name="inner")
    flow = AgentTool(_asking(inner, "refunds"), name="research", description="A flow.")
    parent = scripted(calls(("research", {"task": "t"})), reply("ok"), tools=[flow])
    await parent.prompt("go")
    message = requests_of(parent)[1].messages[-1]
    assert message.is_error
    assert message.text == (
        "Error: the run paused: refund need(s) a person's approval, which node 'ask' of flow "
        "'refunds' cannot ask for; those calls did not run"
    )


def test_anything_promptable_can_be_wrapped_and_nothing_else() -> None:
    with pytest.raises(BuilderError, match=r"needs an Agent \(or anything promptable\), not int"):
        AgentTool(42, name="x", description="d")  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="not type"):
        AgentTool(Agent, name="x", description="d")  # type: ignore[arg-type]


def test_delegation_names_the_sub_agent_and_task_of_a_plain_call_only() -> None:
    sub = Agent(FunctionModel(lambda request: ChatResponse.reply("ok")), name="sub")
    plain = AgentTool(sub, name="ask", description="asks")
    assert plain.delegation({"task": "add 1 2"}) == (sub, "ask", "add 1 2")
    for wrong in ({"task": 3}, {"task": "x", "more": 1}, {}, "task", None):
        assert plain.delegation(wrong) is None  # the registry's validation answers these
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert (
        AgentTool(sub, name="q", description="q", input_schema=schema).delegation({"q": "x"})
        is None
    )
    kept = AgentTool(sub, name="s", description="s", session_id="one")
    assert kept.delegation({"task": "x"}) is None  # a session stays with a plain run


def test_a_supervisors_delegate_tool_names_the_chosen_agent_and_task() -> None:
    sub = Agent(FunctionModel(lambda request: ChatResponse.reply("ok")), name="sub")
    team = Supervisor(FunctionModel(lambda request: ChatResponse.reply("ok")), {"helper": sub})
    delegate = team.agent.tools.get("delegate")
    assert delegate is not None
    assert delegate.delegation({"agent": "helper", "task": "t"}) == (sub, "helper", "t")  # type: ignore[attr-defined]
    for wrong in (
        {"agent": "nobody", "task": "t"},
        {"agent": "helper"},
        {"agent": "helper", "task": 1},
    ):
        assert delegate.delegation(wrong) is None  # type: ignore[attr-defined]
