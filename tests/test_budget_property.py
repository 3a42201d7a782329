"""max_budget end to end: no run ends above its budget, whatever the usage.

The budget check reserves the worst case of the next call before making it: the input at one
token per UTF-8 byte plus allowances for tool schemas, tool calls and what providers add, and
the output at ``max_tokens`` (or the model's most) at the price of the model that may answer. The
fake model here reports any usage a real provider could (up to ``max_tokens`` out, up to the
usual four-characters-per-token estimate in, some of it cached), and hypothesis searches for a
run that ends above its budget.

The tests after the property tests pin down gaps that were closed: input billed above the usual
estimate, no ``max_tokens``, a response naming a model other than the one asked for, and
sub-agents (whose spending must stay within their caller's budget and roll up however they end).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daimon import (
    Agent,
    BudgetExceededError,
    ChatRequest,
    ChatResponse,
    Done,
    Message,
    ModelPrice,
    PriceTable,
    ToolCall,
    Usage,
    UsageEvent,
    tool,
)
from daimon.models import FunctionModel
from daimon.multiagent import AgentTool

EPSILON = 1e-12
"""Slack for float rounding when dollars are added up."""


@dataclass(frozen=True)
class Turn:
    """One model call's usage, as percentages of what is possible, and the tool result it gets."""

    input_percent: float
    output_percent: float
    cached_percent: float
    result_chars: int


def estimate_input(messages: tuple[Message, ...] | list[Message]) -> int:
    """The loop's input estimate: what a provider may bill at most, by this test's assumption."""
    return sum(len(m.text) for m in messages) // 4 + 4 * len(messages)


def charge(price: ModelPrice, usage: Usage) -> float:
    uncached = max(usage.input_tokens - usage.cached_tokens, 0)
    cached_price = price.input if price.cached_input is None else price.cached_input
    return (
        uncached * price.input
        + usage.cached_tokens * cached_price
        + usage.output_tokens * price.output
    ) / 1_000_000


@tool
async def fetch(size: int) -> str:
    """Returns ``size`` characters."""
    return "x" * size


class Fake:
    """Plays a model that calls ``fetch`` once per turn, then answers; records what it billed."""

    def __init__(self, turns: list[Turn], max_tokens: int, price: ModelPrice) -> None:
        self.turns = turns
        self.max_tokens = max_tokens
        self.price = price
        self.billed = 0.0

    def __call__(self, request: ChatRequest) -> ChatResponse:
        index = sum(1 for m in request.messages if m.role == "assistant")
        turn = self.turns[min(index, len(self.turns) - 1)]
        input_tokens = math.floor(turn.input_percent * estimate_input(request.messages) / 100)
        usage = Usage(
            input_tokens=input_tokens,
            output_tokens=math.floor(turn.output_percent * self.max_tokens / 100),
            cached_tokens=math.floor(turn.cached_percent * input_tokens / 100),
            requests=1,
        )
        self.billed += charge(self.price, usage)
        if index < len(self.turns) - 1:
            call = ToolCall(id=f"c{index}", name="fetch", arguments={"size": turn.result_chars})
            return ChatResponse.tool_use(call, usage=usage, model="m")
        return ChatResponse.reply("done", usage=usage, model="m")


# Integers draw much faster than floats, and percentages are fine-grained enough; the worst
# case (100%) and nothing (0%) are drawn often on purpose.
percent = st.sampled_from([100, 100, 95, 50, 0]) | st.integers(0, 100)


@dataclass(frozen=True)
class Case:
    turns: list[Turn]
    price: ModelPrice
    budget: float
    max_tokens: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A scripted run, priced per million tokens, with a budget of a few worst-case calls."""
    turns = draw(
        st.lists(
            st.builds(
                Turn,
                input_percent=percent,
                output_percent=percent,
                cached_percent=percent,
                result_chars=st.integers(0, 20_000),
            ),
            min_size=1,
            max_size=6,
        )
    )
    input_price = draw(st.integers(1, 20_000)) / 1000
    cached = draw(st.none() | st.integers(0, 100))  # a cache read never costs more than input
    price = ModelPrice(
        input=input_price,
        output=draw(st.integers(0, 80_000)) / 1000,
        cached_input=None if cached is None else input_price * cached / 100,
    )
    max_tokens = draw(st.integers(1, 4096))
    worst_call = (max_tokens * price.output + 2_000 * price.input) / 1_000_000
    budget = draw(st.integers(0, 600)) / 100 * worst_call  # room for 0 to 6 big calls
    return Case(turns=turns, price=price, budget=budget, max_tokens=max_tokens)


def agent_for(fake: Fake, price: ModelPrice, budget: float, max_tokens: int | None) -> Agent:
    return Agent(
        FunctionModel(fake, model_name="m"),
        tools=[fetch],
        cost_model=PriceTable({"m": price}, as_of="test"),
        max_budget=budget,
        max_tokens=max_tokens,
        max_iterations=len(fake.turns) + 1,
        max_repeated_tool_calls=None,  # the turns may repeat a call: the budget is under test
    )


async def run_to_the_end(agent: Agent, stream: bool) -> float:
    """The run's cost as the run reports it: its response's, or the budget error's."""
    try:
        if not stream:
            return (await agent.prompt("go")).cost
        streamed = 0.0
        async for event in agent.prompt_stream("go"):
            if isinstance(event, UsageEvent):
                streamed += event.cost
            elif isinstance(event, Done):
                assert event.response is not None
                assert event.response.cost == pytest.approx(streamed, rel=1e-9, abs=1e-15)
                return event.response.cost
        raise AssertionError("no Done")
    except BudgetExceededError as exc:
        assert exc.spent <= exc.limit + EPSILON
        return exc.spent


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(case=cases(), stream=st.booleans())
def test_no_run_ends_above_its_budget(case: Case, stream: bool) -> None:
    fake = Fake(case.turns, case.max_tokens, case.price)
    agent = agent_for(fake, case.price, case.budget, case.max_tokens)
    reported = asyncio.run(run_to_the_end(agent, stream))
    assert fake.billed <= case.budget + EPSILON  # what the provider billed, counted by the test
    assert reported == pytest.approx(fake.billed, rel=1e-9, abs=1e-15)  # and what the run says


def test_a_run_stops_before_the_call_that_could_pass_the_budget() -> None:
    price = ModelPrice(input=1_000_000, output=1_000_000)  # $1 a token: easy sums
    fake = Fake([Turn(100, 100, 0, 0)] * 5, max_tokens=10, price=price)
    agent = agent_for(fake, price, budget=60.0, max_tokens=10)
    with pytest.raises(BudgetExceededError) as caught:
        asyncio.run(agent.prompt("go"))
    assert caught.value.spent == fake.billed <= 60.0
    assert 60.0 - caught.value.spent < 10 + estimate_input([Message.user("go")]) + 100


@dataclass(frozen=True)
class Family:
    """A caller fanning out to sub-agents (which may fan out again), with a budget."""

    budget: int
    fanout: int
    outputs: list[int]
    max_tokens: int
    deep: bool


@st.composite
def families(draw: st.DrawFn) -> Family:
    return Family(
        budget=draw(st.integers(0, 200)),
        fanout=draw(st.integers(1, 4)),
        outputs=draw(st.lists(st.integers(0, 30), min_size=1, max_size=4)),
        max_tokens=draw(st.integers(1, 30)),
        deep=draw(st.booleans()),
    )


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(family=families())
def test_no_run_with_sub_agents_ends_above_its_budget(family: Family) -> None:
    price = ModelPrice(input=1_000, output=1_000_000)  # $0.001 an input token, $1 an output one
    table = PriceTable({"m": price}, as_of="t")
    billed = [0.0]

    def bill(usage: Usage) -> Usage:
        billed[0] += charge(price, usage)
        return usage

    def fan_out(name: str) -> FunctionModel:
        def model(request: ChatRequest) -> ChatResponse:
            usage = bill(Usage(input_tokens=5, output_tokens=1, requests=1))
            if not any(m.role == "tool" for m in request.messages):
                calls = [
                    ToolCall(id=f"c{i}", name=name, arguments={"task": "t"})
                    for i in range(family.fanout)
                ]
                return ChatResponse.tool_use(*calls, usage=usage, model="m")
            return ChatResponse.reply("done", usage=usage, model="m")

        return FunctionModel(model, model_name="m")

    def leaf(request: ChatRequest) -> ChatResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        out = min(family.outputs[turn % len(family.outputs)], family.max_tokens)
        usage = bill(Usage(input_tokens=10, output_tokens=out, requests=1))
        return ChatResponse.reply("found", usage=usage, model="m")

    sub = Agent(FunctionModel(leaf, model_name="m"), cost_model=table, max_tokens=family.max_tokens)
    if family.deep:
        tool = AgentTool(sub, name="leaf", description="Finds")
        sub = Agent(
            fan_out("leaf"),
            tools=[tool],
            cost_model=table,
            max_tokens=1,
            max_repeated_tool_calls=None,
        )
    caller = Agent(
        fan_out("sub"),
        tools=[AgentTool(sub, name="sub", description="Delegates")],
        cost_model=table,
        max_tokens=1,
        max_budget=float(family.budget),
        max_repeated_tool_calls=None,  # it delegates the same task until the budget stops it
    )
    reported = asyncio.run(run_to_the_end(caller, stream=False))
    assert billed[0] <= family.budget + EPSILON
    assert reported == pytest.approx(billed[0], rel=1e-9, abs=1e-12)


def sub_agent_spending(tokens: int) -> Agent:
    """A sub-agent whose one model call costs ``tokens`` dollars."""

    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply("found", usage=Usage(output_tokens=tokens, requests=1), model="m")

    price = ModelPrice(input=0, output=1_000_000)
    return Agent(
        FunctionModel(model, model_name="m"),
        cost_model=PriceTable({"m": price}, as_of="t"),
        max_tokens=tokens,  # so that its reservation, like its spending, is ``tokens`` dollars
    )


def test_sub_agents_roll_up_into_the_callers_response_and_budget() -> None:
    def caller_model(request: ChatRequest) -> ChatResponse:
        usage = Usage(output_tokens=1, requests=1)
        if not any(m.role == "tool" for m in request.messages):
            call = ToolCall(id="c", name="research", arguments={"task": "t"})
            return ChatResponse.tool_use(call, usage=usage, model="m")
        return ChatResponse.reply("done", usage=usage, model="m")

    price = ModelPrice(input=0, output=1_000_000)  # $1 an output token
    caller = Agent(
        FunctionModel(caller_model, model_name="m"),
        tools=[AgentTool(sub_agent_spending(5), name="research", description="Researches")],
        cost_model=PriceTable({"m": price}, as_of="t"),
        max_tokens=1,
    )
    response = asyncio.run(caller.prompt("go"))
    assert response.cost == 1 + 5 + 1
    assert response.usage.output_tokens == 7
    assert response.usage.requests == 3
    # The sub-agent's spend counts against the caller's budget: $6 spent, one more $1 call
    # would fit a $7 budget but not a $6.5 one.
    assert asyncio.run(caller.replace(max_budget=7.0).prompt("go")).cost == 7.0
    with pytest.raises(BudgetExceededError) as caught:
        asyncio.run(caller.replace(max_budget=6.5).prompt("go"))
    assert caught.value.spent == 6.0


# ------------------------------------------------------------------------------ closed gaps
def test_input_billed_above_the_usual_estimate_stays_within_the_budget() -> None:
    price = ModelPrice(input=1_000_000, output=0)  # $1 an input token
    fake = Fake([Turn(300, 0, 0, 0)], max_tokens=1, price=price)  # three times the estimate
    # The usual estimate of "go" is 4 tokens; the 12 billed would pass $5. The reservation (a
    # token a byte, plus allowances for the message and the fetch tool) is more than $5: refused.
    agent = agent_for(fake, price, budget=5.0, max_tokens=1)
    cost = asyncio.run(run_to_the_end(agent, stream=False))
    assert cost <= 5.0


def test_without_max_tokens_the_first_call_reserves_the_models_most_output() -> None:
    price = ModelPrice(input=0, output=1_000_000)  # $1 an output token
    fake = Fake([Turn(0, 100, 0, 0)], max_tokens=100, price=price)  # 100 tokens out
    agent = agent_for(fake, price, budget=10.0, max_tokens=None)
    cost = asyncio.run(run_to_the_end(agent, stream=False))
    assert cost <= 10.0


def test_an_unpriced_agent_model_name_still_reserves() -> None:
    price = ModelPrice(input=0, output=1_000_000)
    fake = Fake([Turn(0, 100, 0, 0)], max_tokens=100, price=price)
    agent = Agent(
        FunctionModel(fake, model_name="alias"),  # the response says "m", which has the price
        cost_model=PriceTable({"m": price}, as_of="test"),
        max_budget=10.0,
        max_tokens=100,
    )
    cost = asyncio.run(run_to_the_end(agent, stream=False))
    assert cost <= 10.0


def test_a_sub_agent_cannot_take_its_caller_past_the_budget() -> None:
    def caller_model(request: ChatRequest) -> ChatResponse:
        if not any(m.role == "tool" for m in request.messages):
            call = ToolCall(id="c", name="research", arguments={"task": "t"})
            return ChatResponse.tool_use(call, usage=Usage(requests=1), model="m")
        return ChatResponse.reply("done", usage=Usage(requests=1), model="m")

    price = ModelPrice(input=0, output=1_000_000)
    caller = Agent(
        FunctionModel(caller_model, model_name="m"),
        tools=[AgentTool(sub_agent_spending(50), name="research", description="Researches")],
        cost_model=PriceTable({"m": price}, as_of="t"),
        max_budget=10.0,
        max_tokens=1,
    )
    cost = asyncio.run(run_to_the_end(caller, stream=False))
    assert cost <= 10.0


def test_a_failed_sub_agent_reports_its_own_sub_agents_cost() -> None:
    def middle_model(request: ChatRequest) -> ChatResponse:
        if not any(m.role == "tool" for m in request.messages):
            call = ToolCall(id="g", name="deep", arguments={"task": "t"})
            return ChatResponse.tool_use(call, usage=Usage(requests=1), model="m")
        raise ConnectionError("the middle agent's provider went down")

    def top_model(request: ChatRequest) -> ChatResponse:
        if not any(m.role == "tool" for m in request.messages):
            call = ToolCall(id="c", name="middle", arguments={"task": "t"})
            return ChatResponse.tool_use(call, usage=Usage(requests=1), model="m")
        return ChatResponse.reply("done", usage=Usage(requests=1), model="m")

    table = PriceTable({"m": ModelPrice(input=0, output=1_000_000)}, as_of="t")
    middle = Agent(
        FunctionModel(middle_model, model_name="m"),
        tools=[AgentTool(sub_agent_spending(7), name="deep", description="Goes deep")],
        cost_model=table,
    )
    top = Agent(
        FunctionModel(top_model, model_name="m"),
        tools=[AgentTool(middle, name="middle", description="Delegates")],
        cost_model=table,
    )
    response = asyncio.run(top.prompt("go"))
    assert response.cost == 7.0  # the grandchild spent $7
