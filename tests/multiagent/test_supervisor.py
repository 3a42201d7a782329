"""Supervisor: routing tasks to named sub-agents, concurrency, roll-up, structured output."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from daimon import (
    Agent,
    BuilderError,
    CancelToken,
    ChatRequest,
    ChatResponse,
    Done,
    ModelPrice,
    PriceTable,
    Role,
    RunCancelled,
    ToolCall,
    ToolResult,
    Usage,
    tool,
)
from daimon.core import Promptable as CorePromptable
from daimon.models import FunctionModel, ScriptedModel
from daimon.multiagent import DELEGATE_TOOL, HandoffNetwork, Supervisor
from daimon.orchestration import Promptable

from .support import PRICES, calls, other_tasks, reply, requests_of, scripted, used


def delegate(agent: str, task: str) -> tuple[str, dict[str, str]]:
    return (DELEGATE_TOOL, {"agent": agent, "task": task})


def team(*supervisor_turns: ChatResponse, **options: object) -> tuple[Supervisor, Agent, Agent]:
    billing = scripted(reply("refund issued", 4, 2), name="billing")
    tech = scripted(reply("reboot the router", 6, 3), name="tech")
    supervisor = Supervisor(
        ScriptedModel(supervisor_turns, model_name="m"),
        {"billing": billing, "tech": tech},
        descriptions={"billing": "invoices and refunds", "tech": "connection problems"},
        cost_model=PRICES,
        **options,  # type: ignore[arg-type]
    )
    return supervisor, billing, tech


def supervisor_requests(supervisor: Supervisor) -> list[ChatRequest]:
    return requests_of(supervisor.agent)


async def test_a_task_is_routed_to_the_named_agent_and_its_answer_flows_back() -> None:
    supervisor, billing, tech = team(
        calls(delegate("billing", "refund order 7"), input_tokens=10, output_tokens=2),
        reply("Your refund is on its way.", 20, 5),
    )
    response = await supervisor.prompt("I want my money back for order 7")

    assert response.text == "Your refund is on its way."
    assert [m.text for m in requests_of(billing)[0].messages] == ["refund order 7"]
    assert requests_of(tech) == []
    result = supervisor_requests(supervisor)[1].messages[-1]
    assert (result.role, result.text, result.is_error) == (Role.TOOL, "refund issued", False)
    # supervisor 30 in / 7 out, billing 4 in / 2 out, all at $1 in and $2 out
    assert response.usage == Usage(input_tokens=34, output_tokens=9, requests=3)
    assert response.cost == pytest.approx(34 + 2 * 9)


async def test_the_delegate_tool_offers_the_agents_by_name() -> None:
    supervisor, _, _ = team(reply("hi"))
    await supervisor.prompt("hello")
    [request] = supervisor_requests(supervisor)
    [spec] = request.tools
    assert spec.name == "delegate"
    assert spec.parameters["properties"]["agent"]["enum"] == ["billing", "tech"]
    assert spec.parameters["required"] == ["agent", "task"]
    assert "- billing: invoices and refunds" in spec.description
    system = request.messages[0]
    assert system.role is Role.SYSTEM
    assert "- tech: connection problems" in system.text


async def test_a_delegation_to_an_unknown_agent_tells_the_model_the_known_ones() -> None:
    supervisor, billing, tech = team(
        calls(delegate("sales", "sell more")), reply("There is no sales agent.")
    )
    response = await supervisor.prompt("sell")
    assert response.text == "There is no sales agent."
    error = supervisor_requests(supervisor)[1].messages[-1]
    assert error.is_error
    assert "'sales'" in error.text and "'billing'" in error.text and "'tech'" in error.text
    assert requests_of(billing) == requests_of(tech) == []


async def test_unknown_agents_are_refused_even_without_schema_validation() -> None:
    supervisor, _, _ = team(
        calls(delegate("sales", "sell more")), reply("ok"), validate_tool_inputs=False
    )
    await supervisor.prompt("sell")
    error = supervisor_requests(supervisor)[1].messages[-1]
    assert error.is_error
    assert error.text == "Error: there is no agent 'sales'; the agents are: 'billing', 'tech'"


async def test_delegations_of_one_turn_run_concurrently() -> None:
    both_running = asyncio.Barrier(3)  # the two sub-agents and the check below
    log: list[str] = []

    def specialist(name: str) -> Agent:
        async def answer(request: ChatRequest) -> ChatResponse:
            log.append(f"{name} started")
            # Waits for the other sub-agent: run one after the other, this never returns.
            await both_running.wait()
            log.append(f"{name} finished")
            return ChatResponse.reply(f"{name} done", usage=used(1, 1), model="m")

        return Agent(FunctionModel(answer, model_name="m"), name=name)

    supervisor = Supervisor(
        ScriptedModel(
            (calls(delegate("a", "task a"), delegate("b", "task b")), reply("both done")),
            model_name="m",
        ),
        {"a": specialist("a"), "b": specialist("b")},
    )
    run = asyncio.create_task(supervisor.prompt("do a and b"))
    async with asyncio.timeout(5):  # a deadlock (sequential runs) fails instead of hanging
        await both_running.wait()
    response = await run
    assert response.text == "both done"
    assert sorted(log[:2]) == ["a started", "b started"]
    assert sorted(log[2:]) == ["a finished", "b finished"]
    results = supervisor_requests(supervisor)[1].messages[-2:]
    assert [m.text for m in results] == ["a done", "b done"]
    assert response.usage.requests == 4


async def test_a_sub_agent_that_raises_is_reported_and_the_supervisor_goes_on() -> None:
    def broken(request: ChatRequest) -> ChatResponse:
        raise ValueError("database is down")

    supervisor = Supervisor(
        ScriptedModel(
            (calls(delegate("billing", "refund")), reply("Billing is unavailable.")), model_name="m"
        ),
        {"billing": Agent(FunctionModel(broken))},
    )
    response = await supervisor.prompt("refund me")
    assert response.text == "Billing is unavailable."
    error = supervisor_requests(supervisor)[1].messages[-1]
    assert error.is_error
    assert error.text == "Error: agent 'billing' failed: ValueError: database is down"


@dataclass
class Ticket:
    team: str
    summary: str
    refund: bool


async def test_structured_output_after_delegating_through_the_output_tool() -> None:
    supervisor, billing, _ = team(
        calls(delegate("billing", "refund order 7")),
        calls(("final_result", {"team": "billing", "summary": "refund issued", "refund": True})),
        output_type=Ticket,
    )
    response = await supervisor.prompt("refund order 7")
    assert response.output == Ticket(team="billing", summary="refund issued", refund=True)
    first = supervisor_requests(supervisor)[0]
    assert [spec.name for spec in first.tools] == ["delegate", "final_result"]
    assert len(requests_of(billing)) == 1


async def test_structured_output_after_delegating_with_native_json_output() -> None:
    turns = [
        calls(delegate("tech", "fix the wifi")),
        ChatResponse.reply(
            json.dumps({"team": "tech", "summary": "reboot", "refund": False}), model="m"
        ),
        # an invalid answer first would be retried: prove the retry path with tools on too
    ]
    seen: list[ChatRequest] = []

    def model(request: ChatRequest) -> ChatResponse:
        seen.append(request)
        return turns.pop(0)

    tech = scripted(reply("reboot the router"))
    supervisor = Supervisor(
        FunctionModel(model, supports_json_schema=True),
        {"tech": tech},
        output_type=Ticket,
    )
    response = await supervisor.prompt("wifi broken")
    assert response.output == Ticket(team="tech", summary="reboot", refund=False)
    assert seen[0].response_format is not None
    assert [spec.name for spec in seen[0].tools] == ["delegate"]


async def test_a_wrong_typed_answer_is_retried_after_delegating() -> None:
    supervisor, _, _ = team(
        calls(delegate("billing", "refund")),
        calls(("final_result", {"team": "billing"})),  # missing fields: refused, retried
        calls(("final_result", {"team": "billing", "summary": "ok", "refund": True})),
        output_type=Ticket,
    )
    response = await supervisor.prompt("refund")
    assert response.output == Ticket(team="billing", summary="ok", refund=True)
    retry = supervisor_requests(supervisor)[2].messages[-1]
    assert retry.is_error and "summary" in retry.text


async def test_the_supervisors_agents_spend_from_its_budget() -> None:
    # Billing's answer would cost $1000 (500 output tokens at $2), past the $100 budget: it is
    # refused before its call, and the supervisor's model reads why.
    cheap_input = PriceTable({"m": ModelPrice(input=1_000, output=2_000_000)}, as_of="t")
    billing = Agent(
        ScriptedModel([reply("refund issued", 0, 500)], model_name="m"),
        name="billing",
        cost_model=cheap_input,
        max_tokens=500,
    )
    supervisor = Supervisor(
        ScriptedModel(
            [calls(delegate("billing", "refund"), input_tokens=0), reply("done", 0, 1)],
            model_name="m",
        ),
        {"billing": billing},
        system_prompt="Delegate.",
        cost_model=cheap_input,
        max_tokens=1,
        max_budget=100.0,
    )
    response = await supervisor.prompt("refund")
    assert (response.text, response.cost) == ("done", pytest.approx(4.0))
    assert requests_of(billing) == []
    refusal = requests_of(supervisor.agent)[1].messages[-1]
    assert refusal.is_error and "BudgetExceededError" in refusal.text


async def test_cancelling_stops_every_running_delegation() -> None:
    started: list[str] = []
    stopped: list[str] = []
    both = asyncio.Event()

    def stuck(name: str) -> Agent:
        async def answer(request: ChatRequest) -> ChatResponse:
            started.append(name)
            if len(started) == 2:
                both.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                stopped.append(name)
                raise
            raise AssertionError("unreachable")

        return Agent(FunctionModel(answer), name=name)

    supervisor = Supervisor(
        ScriptedModel((calls(delegate("a", "x"), delegate("b", "y")), reply("never"))),
        {"a": stuck("a"), "b": stuck("b")},
    )
    token = CancelToken()

    async def cancel_once_both_run() -> None:
        await both.wait()
        token.cancel("stop")

    canceller = asyncio.create_task(cancel_once_both_run())
    with pytest.raises(RunCancelled, match="stop"):
        await supervisor.prompt("go", cancel=token)
    await canceller
    assert sorted(stopped) == ["a", "b"]
    assert other_tasks() == set()
    this = asyncio.current_task()
    assert this is not None and this.cancelling() == 0
    await asyncio.sleep(0)  # a cancellation request left on this task would raise here


async def test_streaming_shows_each_delegation_as_a_tool_result() -> None:
    supervisor, _, _ = team(
        calls(delegate("billing", "refund"), delegate("tech", "reboot")), reply("all done")
    )
    events = [e async for e in supervisor.prompt_stream("help")]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.name, r.output.content) for r in results] == [
        ("delegate", "refund issued"),
        ("delegate", "reboot the router"),
    ]
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text == "all done"


async def test_a_supervisor_plugs_into_orchestration_like_an_agent() -> None:
    supervisor, _, _ = team(reply("hi"))
    assert isinstance(supervisor, Promptable)


async def test_a_supervisor_delegates_to_any_promptable_and_resumes_its_own_pauses() -> None:
    @tool(requires_approval=True)
    def publish(text: str) -> str:
        """Publish a text."""
        return f"published {text}"

    billing = scripted(reply("billing handled it"), name="billing")
    desk = HandoffNetwork({"billing": billing}, start="billing", name="desk")
    supervisor = Supervisor(
        ScriptedModel(
            [
                calls((DELEGATE_TOOL, {"agent": "desk", "task": "charged twice"})),
                calls(("publish", {"text": "fixed"})),
                reply("all done"),
            ],
            model_name="m",
        ),
        {"desk": desk},
        tools=[publish],
        name="lead",
    )
    assert isinstance(supervisor, CorePromptable) and supervisor.name == "lead"
    paused = await supervisor.prompt("help")
    assert [a.call.name for a in paused.pending_approvals] == ["publish"]
    delegated = [m for m in paused.messages if m.role is Role.TOOL]
    assert [m.text for m in delegated] == ["billing handled it"]
    done = await supervisor.resume(paused, {paused.pending_approvals[0].id: True})
    assert done.text == "all done"
    assert supervisor.memory is supervisor.agent.memory


def test_configuration_mistakes_are_refused() -> None:
    model = FunctionModel(lambda r: "x")
    agent = Agent(model)
    with pytest.raises(BuilderError, match="at least one agent"):
        Supervisor(model, {})
    with pytest.raises(BuilderError, match="not an Agent"):
        Supervisor(model, {"a": "not an agent"})  # type: ignore[dict-item]
    with pytest.raises(BuilderError, match="non-empty"):
        Supervisor(model, {"": agent})
    with pytest.raises(BuilderError, match="unknown agents: c"):
        Supervisor(model, {"a": agent}, descriptions={"c": "?"})
    with pytest.raises(BuilderError, match="cost_model"):
        Supervisor(model, {"a": agent}, max_budget=1.0)


def test_supervisor_agent_is_configured_from_the_options() -> None:
    supervisor = Supervisor(
        FunctionModel(lambda r: "x"),
        {"a": Agent(FunctionModel(lambda r: "y"))},
        name="boss",
        system_prompt="Delegate.",
        max_iterations=3,
        temperature=0.0,
    )
    agent = supervisor.agent
    assert (agent.name, agent.system_prompt, agent.max_iterations, agent.temperature) == (
        "boss",
        "Delegate.",
        3,
        0.0,
    )
    assert agent.tools.names == ("delegate",)
    assert repr(supervisor) == "Supervisor(agents=['a'])"


def test_tool_call_ids_used_here_are_plain() -> None:
    # guards the helper above: the scripted turns call tools by ids c0, c1, ...
    assert calls(delegate("a", "b")).message.tool_calls == (
        ToolCall(id="c0", name="delegate", arguments={"agent": "a", "task": "b"}),
    )
