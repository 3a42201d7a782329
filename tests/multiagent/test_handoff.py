"""HandoffNetwork: handoffs, history filters, limits, sessions, streaming and cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from daimon import (
    Agent,
    ApprovalRequiredError,
    BuilderError,
    CancelToken,
    ChatRequest,
    ChatResponse,
    Done,
    DuplicateToolError,
    EndRun,
    Message,
    OrchestrationError,
    Role,
    RunCancelled,
    RunContext,
    TextDelta,
    ToolResult,
    Usage,
    tool,
)
from daimon.core import Promptable as CorePromptable
from daimon.memory import SlidingWindowMemory
from daimon.models import FunctionModel
from daimon.multiagent import (
    HANDOFF_PREFIX,
    Handoff,
    HandoffNetwork,
    HandoffResult,
    MaxHandoffsError,
    keep_all,
    last_n,
    text_only,
)
from daimon.orchestration import Promptable

from .support import calls, other_tasks, reply, requests_of, scripted


def transfer(target: str, reason: str) -> tuple[str, dict[str, Any]]:
    return (f"transfer_to_{target}", {"reason": reason})


@dataclass
class Desk:
    network: HandoffNetwork
    triage: Agent
    billing: Agent
    tech: Agent


def desk(*billing_turns: ChatResponse | str, **options: Any) -> Desk:
    """triage hands the user to billing (with a word first); billing answers with its turns."""
    triage = scripted(
        calls(transfer("billing", "double charge"), text="Let me get billing.", input_tokens=10),
        name="triage",
        system_prompt="You triage.",
    )
    billing = scripted(
        *(billing_turns or (reply("Refunded the duplicate.", 20, 4),)),
        name="billing",
        system_prompt="You do billing.",
    )
    tech = scripted(name="tech", system_prompt="You do tech.")
    network = HandoffNetwork(
        {"triage": triage, "billing": billing, "tech": tech}, start="triage", **options
    )
    return Desk(network, triage, billing, tech)


def seen_by(agent: Agent, call: int = 0) -> list[tuple[Role, str]]:
    return [(m.role, m.text) for m in requests_of(agent)[call].messages]


async def test_a_handoff_passes_the_conversation_and_the_answer_comes_from_the_receiver() -> None:
    d = desk()
    response = await d.network.prompt("I was charged twice")

    assert response.text == "Refunded the duplicate."
    assert response.output == HandoffResult(
        agent="billing",
        output="Refunded the duplicate.",
        handoffs=(Handoff(source="triage", target="billing", reason="double charge"),),
    )
    # triage: 10 in / 1 out; billing: 20 in / 4 out; $1 per input and $2 per output token
    assert response.usage == Usage(input_tokens=30, output_tokens=5, requests=2)
    assert response.cost == pytest.approx(30 + 2 * 5)
    assert response.iterations == 2
    assert [m.role for m in response.messages] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.USER,
        Role.ASSISTANT,
    ]
    assert response.messages[2].text == "Transferred to billing."
    assert requests_of(d.tech) == []


async def test_the_receiver_sees_user_and_assistant_text_then_a_note_by_default() -> None:
    d = desk()
    await d.network.prompt("I was charged twice")
    seen = seen_by(d.billing)
    assert seen[:3] == [
        (Role.SYSTEM, "You do billing."),
        (Role.USER, "I was charged twice"),
        (Role.ASSISTANT, "Let me get billing."),
    ]
    [(role, note)] = seen[3:]
    assert role is Role.USER
    assert "triage" in note and "billing" in note and "double charge" in note
    assert all(not m.tool_calls for m in requests_of(d.billing)[0].messages)


async def test_each_agent_is_offered_a_handoff_to_every_other_by_default() -> None:
    d = desk()
    await d.network.prompt("I was charged twice")
    assert [s.name for s in requests_of(d.triage)[0].tools] == [
        "transfer_to_billing",
        "transfer_to_tech",
    ]
    assert [s.name for s in requests_of(d.billing)[0].tools] == [
        "transfer_to_triage",
        "transfer_to_tech",
    ]
    assert requests_of(d.triage)[0].tools[0].parameters["required"] == ["reason"]


async def test_the_agents_given_are_not_changed() -> None:
    d = desk()
    await d.network.prompt("I was charged twice")
    assert d.triage.tools.names == d.billing.tools.names == ()
    assert d.network.agents["triage"] is d.triage
    # and each still works on its own
    assert (await scripted(reply("alone"), name="x").prompt("hi")).text == "alone"


async def test_keep_all_shows_the_tool_calls_too() -> None:
    d = desk(history_filter=keep_all)
    await d.network.prompt("I was charged twice")
    messages = requests_of(d.billing)[0].messages
    assert [m.role for m in messages] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.USER,
    ]
    assert messages[2].tool_calls[0].name == "transfer_to_billing"


async def test_last_n_keeps_only_the_latest_text() -> None:
    d = desk(history_filter=last_n(1))
    await d.network.prompt("I was charged twice")
    seen = seen_by(d.billing)
    assert seen[:2] == [
        (Role.SYSTEM, "You do billing."),
        (Role.ASSISTANT, "Let me get billing."),
    ]
    assert len(seen) == 3


async def test_a_custom_filter_gets_the_whole_conversation_so_far() -> None:
    given: list[list[Message]] = []

    def nothing(messages: Sequence[Message]) -> list[Message]:
        given.append(list(messages))
        return []

    d = desk(history_filter=nothing)
    await d.network.prompt("I was charged twice")
    assert [[m.role for m in g] for g in given] == [[Role.USER, Role.ASSISTANT, Role.TOOL]]
    assert [role for role, _ in seen_by(d.billing)] == [Role.SYSTEM, Role.USER]  # just the note


def test_the_filters() -> None:
    conversation = [
        Message.user("hi"),
        Message.assistant("checking", [_call("lookup")]),
        Message.tool("c", "data", name="lookup"),
        Message.assistant("", [_call("transfer_to_x")]),
        Message.tool("d", "Transferred", name="transfer_to_x"),
        Message.system("internal"),
        Message.assistant("done"),
    ]
    assert [(m.role, m.text, m.tool_calls) for m in text_only(conversation)] == [
        (Role.USER, "hi", ()),
        (Role.ASSISTANT, "checking", ()),
        (Role.ASSISTANT, "done", ()),
    ]
    assert keep_all(conversation) == conversation
    assert [m.text for m in last_n(2)(conversation)] == ["checking", "done"]
    assert last_n(0)(conversation) == []
    assert [m.text for m in last_n(9)(conversation)] == ["hi", "checking", "done"]
    with pytest.raises(BuilderError):
        last_n(-1)


def _call(name: str) -> Any:
    from daimon import ToolCall

    return ToolCall(id=name[0], name=name, arguments={})


async def test_a_handoff_to_an_unknown_agent_is_an_error_the_model_can_fix() -> None:
    triage = scripted(
        calls(transfer("sales", "wants to buy")),
        calls(transfer("billing", "wants to pay")),
        name="triage",
    )
    billing = scripted(reply("Paid."), name="billing")
    network = HandoffNetwork({"triage": triage, "billing": billing}, start="triage")
    response = await network.prompt("buy")
    error = requests_of(triage)[1].messages[-1]
    assert error.is_error
    assert "'transfer_to_sales' not found" in error.text
    assert "transfer_to_billing" in error.text
    assert response.text == "Paid."
    assert response.output.agent == "billing"


async def test_too_many_handoffs_raise() -> None:
    ping = scripted(*[calls(transfer("pong", "yours"))] * 3, name="ping")
    pong = scripted(*[calls(transfer("ping", "no, yours"))] * 3, name="pong")
    network = HandoffNetwork({"ping": ping, "pong": pong}, start="ping", max_handoffs=2)
    with pytest.raises(MaxHandoffsError) as raised:
        await network.prompt("hello")
    error = raised.value
    assert isinstance(error, OrchestrationError)
    assert error.max_handoffs == 2
    assert [(h.source, h.target) for h in error.handoffs] == [
        ("ping", "pong"),
        ("pong", "ping"),
        ("ping", "pong"),
    ]
    assert str(error) == "max handoffs (2) exceeded: ping -> pong -> ping -> pong"
    assert len(requests_of(ping)) == 2 and len(requests_of(pong)) == 1


async def test_no_handoff_at_all_with_max_handoffs_zero() -> None:
    d = desk(max_handoffs=0)
    with pytest.raises(MaxHandoffsError, match=r"\(0\) exceeded: triage -> billing"):
        await d.network.prompt("I was charged twice")
    assert requests_of(d.billing) == []


async def test_routes_limit_who_may_hand_off_to_whom() -> None:
    d = desk(routes={"triage": ["billing"]})
    assert d.network.routes == {"triage": ("billing",), "billing": (), "tech": ()}
    await d.network.prompt("I was charged twice")
    assert [s.name for s in requests_of(d.triage)[0].tools] == ["transfer_to_billing"]
    assert requests_of(d.billing)[0].tools == ()


async def test_descriptions_show_in_the_handoff_tools() -> None:
    d = desk(descriptions={"billing": "invoices and refunds"})
    await d.network.prompt("I was charged twice")
    assert "invoices and refunds" in requests_of(d.triage)[0].tools[0].description


async def test_history_instructions_and_run_id_are_taken_as_an_agent_takes_them() -> None:
    d = desk(name="desk")
    assert isinstance(d.network, CorePromptable) and d.network.name == "desk"
    earlier = [Message.user("hello"), Message.assistant("Hi, how can I help?")]
    response = await d.network.prompt(
        "I was charged twice", history=earlier, instructions="Be brief.", run_id="turn-1"
    )
    assert response.run_id == "turn-1"
    assert seen_by(d.triage)[:4] == [
        (Role.SYSTEM, "You triage.\n\nBe brief."),
        (Role.USER, "hello"),
        (Role.ASSISTANT, "Hi, how can I help?"),
        (Role.USER, "I was charged twice"),
    ]
    assert seen_by(d.billing)[0] == (Role.SYSTEM, "You do billing.\n\nBe brief.")
    assert seen_by(d.billing)[1] == (Role.USER, "hello")
    assert d.network.memory is d.triage.memory
    with pytest.raises(BuilderError, match="history or a session_id, not both"):
        await d.network.prompt("x", history=earlier, session_id="s1")


def test_configuration_mistakes_are_refused() -> None:
    a = scripted(name="a")
    b = scripted(name="b")
    with pytest.raises(BuilderError, match="at least one agent"):
        HandoffNetwork({}, start="a")
    with pytest.raises(BuilderError, match="start agent 'c'"):
        HandoffNetwork({"a": a}, start="c")
    with pytest.raises(BuilderError, match="tool name"):
        HandoffNetwork({"a b": a}, start="a b")
    with pytest.raises(BuilderError, match="not an Agent"):
        HandoffNetwork({"a": object()}, start="a")  # type: ignore[dict-item]
    with pytest.raises(BuilderError, match="max_handoffs"):
        HandoffNetwork({"a": a}, start="a", max_handoffs=-1)
    with pytest.raises(BuilderError, match="routes name unknown agents: c"):
        HandoffNetwork({"a": a, "b": b}, start="a", routes={"c": ["a"]})
    with pytest.raises(BuilderError, match="unknown agent 'c'"):
        HandoffNetwork({"a": a, "b": b}, start="a", routes={"a": ["c"]})
    with pytest.raises(BuilderError, match="itself"):
        HandoffNetwork({"a": a, "b": b}, start="a", routes={"a": ["a"]})
    with pytest.raises(BuilderError, match="not a string"):
        HandoffNetwork({"a": a, "b": b}, start="a", routes={"a": "b"})
    with pytest.raises(BuilderError, match="descriptions name unknown agents: z"):
        HandoffNetwork({"a": a}, start="a", descriptions={"z": "?"})
    with pytest.raises(BuilderError, match="history_filter"):
        HandoffNetwork({"a": a}, start="a", history_filter="all")  # type: ignore[arg-type]

    @tool
    def transfer_to_b(reason: str) -> str:
        """Not a real handoff."""
        return reason

    clashing = scripted(name="a", tools=[transfer_to_b])
    with pytest.raises(DuplicateToolError):
        HandoffNetwork({"a": clashing, "b": b}, start="a")


async def test_streaming_yields_every_agents_events_and_one_done() -> None:
    d = desk()
    events = [e async for e in d.network.prompt_stream("I was charged twice")]
    dones = [e for e in events if isinstance(e, Done)]
    assert len(dones) == 1 and events[-1] is dones[0]
    handoffs = [
        e for e in events if isinstance(e, ToolResult) and e.name.startswith(HANDOFF_PREFIX)
    ]
    assert [(e.name, e.output.content) for e in handoffs] == [
        ("transfer_to_billing", "Transferred to billing.")
    ]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "Let me get billing.Refunded the duplicate."
    response = dones[0].response
    assert response is not None
    assert response.text == "Refunded the duplicate."
    assert response.output.agent == "billing"
    assert response.usage.requests == 2


async def test_stopping_a_stream_early_leaves_nothing_running() -> None:
    d = desk()
    stream = d.network.prompt_stream("I was charged twice")
    async for _event in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]
    assert other_tasks() == set()


async def test_a_session_carries_the_conversation_to_the_next_turn() -> None:
    d = desk(
        reply("Refunded the duplicate."), reply("It takes 3 days."), memory=SlidingWindowMemory()
    )
    first = await d.network.prompt("I was charged twice", session_id="s1")
    assert first.session_id == "s1"
    second = await d.network.prompt("How long?", session_id="s1", agent=first.output.agent)
    assert second.text == "It takes 3 days."
    assert second.output == HandoffResult(agent="billing", output="It takes 3 days.", handoffs=())
    texts = [text for _, text in seen_by(d.billing, 1)]
    assert texts[0] == "You do billing."
    assert texts[1:3] == ["I was charged twice", "Let me get billing."]
    assert texts[-2:] == ["Refunded the duplicate.", "How long?"]
    assert len(requests_of(d.triage)) == 1  # billing carried on; triage was not asked again


async def test_a_session_is_kept_in_the_start_agents_memory_by_default() -> None:
    d = desk()
    await d.network.prompt("I was charged twice", session_id="s2")
    stored = await d.triage.memory.get_messages("s2")
    assert stored[0].text == "I was charged twice"
    assert stored[-1].text == "Refunded the duplicate."


async def test_starting_with_an_unknown_agent_is_refused() -> None:
    d = desk()
    with pytest.raises(ValueError, match="no agent 'sales'"):
        await d.network.prompt("hi", agent="sales")


async def test_an_agent_pausing_for_approval_stops_the_network() -> None:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund."""
        return "refunded"

    network = HandoffNetwork(
        {
            "triage": scripted(calls(transfer("billing", "refund")), name="triage"),
            "billing": scripted(calls(("refund", {"amount": 5})), name="b", tools=[refund]),
        },
        start="triage",
    )
    with pytest.raises(ApprovalRequiredError, match=r"refund need\(s\) a person's approval"):
        await network.prompt("refund me")


async def test_the_final_agents_typed_output_is_in_the_result() -> None:
    @dataclass
    class Refund:
        amount: int

    billing = scripted(calls(("final_result", {"amount": 12})), name="billing", output_type=Refund)
    triage = scripted(calls(transfer("billing", "refund")), name="triage")
    network = HandoffNetwork({"triage": triage, "billing": billing}, start="triage")
    response = await network.prompt("refund me")
    assert response.output.output == Refund(amount=12)
    assert response.output.agent == "billing"


async def test_a_tool_ending_the_run_ends_the_network_turn() -> None:
    @tool
    def close_ticket() -> str:
        """Close the ticket."""
        raise EndRun({"closed": True}, text="Ticket closed.")

    triage = scripted(calls(("close_ticket", {})), name="triage", tools=[close_ticket])
    network = HandoffNetwork({"triage": triage, "other": scripted(name="o")}, start="triage")
    response = await network.prompt("close it")
    assert response.text == "Ticket closed."
    assert response.output == HandoffResult(agent="triage", output={"closed": True})


async def test_deps_reach_the_tools_of_every_agent() -> None:
    seen: list[tuple[str, Any]] = []

    @tool
    def whoami(ctx: RunContext[str]) -> str:
        """Who."""
        seen.append((ctx.tool_name, ctx.deps))
        return "you"

    triage = scripted(
        calls(("whoami", {})), calls(transfer("b", "x")), name="triage", tools=[whoami]
    )
    b = scripted(calls(("whoami", {})), reply("ok"), name="b", tools=[whoami])
    network = HandoffNetwork({"triage": triage, "b": b}, start="triage")
    await network.prompt("go", deps="user-42")
    assert seen == [("whoami", "user-42"), ("whoami", "user-42")]


async def test_concurrent_turns_do_not_see_each_other() -> None:
    def front(request: ChatRequest) -> ChatResponse:
        if request.messages[-1].role is Role.TOOL:
            raise AssertionError("front should have handed off")
        return calls(transfer("back", request.messages[-1].text))

    def back(request: ChatRequest) -> ChatResponse:
        users = [m.text for m in request.messages if m.role is Role.USER]
        return reply(f"back saw {users[0]}")

    network = HandoffNetwork(
        {"front": Agent(FunctionModel(front)), "back": Agent(FunctionModel(back))}, start="front"
    )
    one, two = await asyncio.gather(network.prompt("one"), network.prompt("two"))
    assert (one.text, two.text) == ("back saw one", "back saw two")


async def test_cancelling_stops_the_agent_answering() -> None:
    started = asyncio.Event()
    stopped: list[str] = []

    async def stuck(request: ChatRequest) -> ChatResponse:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.append("billing")
            raise
        raise AssertionError("unreachable")

    triage = scripted(calls(transfer("billing", "x")), name="triage")
    network = HandoffNetwork(
        {"triage": triage, "billing": Agent(FunctionModel(stuck))}, start="triage"
    )
    token = CancelToken()

    async def cancel_once_started() -> None:
        await started.wait()
        token.cancel("hung up")

    canceller = asyncio.create_task(cancel_once_started())
    with pytest.raises(RunCancelled, match="hung up"):
        await network.prompt("help", cancel=token)
    await canceller
    assert stopped == ["billing"]
    assert other_tasks() == set()


async def test_a_network_plugs_into_orchestration_like_an_agent() -> None:
    d = desk()
    assert isinstance(d.network, Promptable)
    assert repr(d.network) == "HandoffNetwork(agents=['triage', 'billing', 'tech'], start='triage')"


async def test_a_networks_response_goes_through_the_codec() -> None:
    from daimon.core import AgentResponse, codec

    d = desk()
    response = await d.network.prompt("I was charged twice")
    back = codec.loads(codec.dumps(response), AgentResponse)
    assert back.text == response.text
    assert back.messages == response.messages
    assert back.output["agent"] == "billing"
    assert back.output["handoffs"][0]["reason"] == "double charge"
