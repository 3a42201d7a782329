"""The reservation a budget holds before each model call: its input bound and its output."""

from __future__ import annotations

import dataclasses

import pytest

from daimon import (
    Agent,
    BudgetExceededError,
    ChatRequest,
    ChatResponse,
    Message,
    ModelPrice,
    PriceTable,
    RunState,
    ToolCall,
    Usage,
    tool,
)
from daimon.agent._budget import (
    PER_IMAGE,
    PER_MESSAGE,
    PER_REQUEST,
    PER_TOOL,
    PER_TOOL_CALL,
    TOOLS_PREAMBLE,
    input_tokens_at_most,
)
from daimon.core.chat import ResponseFormat
from daimon.core.messages import ImagePart, TextPart
from daimon.core.tools import ToolSpec
from daimon.middleware import Middleware
from daimon.models import FunctionModel

DOLLAR_AN_INPUT_TOKEN = PriceTable({"m": ModelPrice(input=1_000_000, output=0)}, as_of="t")


def test_text_counts_a_token_a_byte_plus_the_allowances() -> None:
    messages = [Message.system("ab"), Message.user("héllo")]  # é is two bytes
    assert input_tokens_at_most(messages) == PER_REQUEST + 2 * PER_MESSAGE + 2 + 6


def test_tool_calls_results_and_images_count() -> None:
    call = ToolCall(id="c1", name="fetch", arguments={"size": 10})
    messages = [
        Message.user((TextPart(text="see"), ImagePart(url="https://x/y.png"))),
        Message.assistant("", tool_calls=(call,)),
        Message.tool("c1", "xxxx", name="fetch"),
    ]
    expected = (
        PER_REQUEST
        + 3 * PER_MESSAGE
        + (3 + PER_IMAGE)
        + (PER_TOOL_CALL + len("c1") + len("fetch") + len('{"size":10}'))
        + (4 + PER_TOOL_CALL + len("c1") + len("fetch"))
    )
    assert input_tokens_at_most(messages) == expected


def test_tool_schemas_and_the_response_schema_count() -> None:
    spec = ToolSpec(name="t", description="d", parameters={"type": "object"})
    bare = input_tokens_at_most([])
    with_tool = input_tokens_at_most([], [spec])
    schema = '{"name": "t", "description": "d", "parameters": {"type": "object"}}'
    assert with_tool - bare == TOOLS_PREAMBLE + len(schema) + PER_TOOL
    assert input_tokens_at_most([], [spec]) == with_tool  # worked out once, then remembered
    answer = ResponseFormat(name="a", schema={"type": "object"})
    with_schema = input_tokens_at_most([], (), answer)
    assert with_schema - bare == PER_TOOL + len('{"name": "a", "schema": {"type": "object"}}')


def test_the_reservation_covers_what_middleware_adds_to_the_request() -> None:
    calls: list[ChatRequest] = []

    def model(request: ChatRequest) -> ChatResponse:
        calls.append(request)
        return ChatResponse.reply("ok", usage=Usage(requests=1), model="m")

    class AddsDocuments(Middleware):
        async def on_request(self, request: ChatRequest, state: RunState) -> ChatRequest:
            document = Message.user("x" * 1_000)
            return dataclasses.replace(request, messages=(*request.messages, document))

    agent = Agent(
        FunctionModel(model, model_name="m"),
        cost_model=DOLLAR_AN_INPUT_TOKEN,
        max_budget=500.0,  # enough for "go", not for the thousand characters added to it
        max_tokens=1,
    )
    assert agent.prompt_sync("go").text == "ok"
    with pytest.raises(BudgetExceededError):
        agent.replace(middleware=[AddsDocuments()]).prompt_sync("go")
    assert len(calls) == 1


def test_without_max_tokens_the_price_entrys_output_limit_is_reserved() -> None:
    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply("ok", usage=Usage(output_tokens=100, requests=1), model="m")

    def table(limit: int | None) -> PriceTable:
        price = ModelPrice(input=0, output=1_000_000, max_output_tokens=limit)
        return PriceTable({"m": price}, as_of="t")

    agent = Agent(FunctionModel(model, model_name="m"), cost_model=table(100), max_budget=100.0)
    assert agent.prompt_sync("go").cost == 100.0
    with pytest.raises(BudgetExceededError):  # the default, 128,000 tokens, does not fit
        agent.replace(cost_model=table(None)).prompt_sync("go")


def test_after_a_response_names_a_dearer_model_its_price_is_reserved() -> None:
    prices = PriceTable(
        {"cheap": ModelPrice(input=0, output=1_000_000), "dear": ModelPrice(input=0, output=5e6)},
        as_of="t",
    )

    @tool
    def again() -> str:
        """Asks for another turn."""
        return "again"

    def model(request: ChatRequest) -> ChatResponse:
        call = ToolCall(id=f"c{len(request.messages)}", name="again", arguments={})
        return ChatResponse.tool_use(call, usage=Usage(output_tokens=1, requests=1), model="dear")

    agent = Agent(
        FunctionModel(model, model_name="cheap"),  # asked for "cheap", answered by "dear"
        tools=[again],
        cost_model=prices,
        max_budget=8.0,
        max_tokens=1,
    )
    with pytest.raises(BudgetExceededError) as refused:
        agent.prompt_sync("go")
    # First call reserved $1 at the requested model's price and cost $5; the second would
    # reserve $5 at the price of the model that answered: 5 + 5 > 8.
    assert refused.value.spent == 5.0


def test_a_refused_first_call_says_what_was_reserved_and_what_to_set() -> None:
    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply("ok", usage=Usage(output_tokens=1, requests=1), model="m")

    price = ModelPrice(input=0, output=1_000_000, max_output_tokens=4_096)
    agent = Agent(
        FunctionModel(model, model_name="m"),
        cost_model=PriceTable({"m": price}, as_of="t"),
        max_budget=100.0,
    )
    with pytest.raises(BudgetExceededError) as refused:
        agent.prompt_sync("go")
    error = refused.value
    assert (error.spent, error.limit, error.reserved) == (0.0, 100.0, 4_096.0)
    message = str(error)
    assert "could cost up to $4096.000000" in message
    assert "$0.000000 already spent" in message and "$100.000000 limit" in message
    assert "4096 output tokens" in message
    assert "set the agent's max_tokens" in message

    capped = agent.replace(max_tokens=50)  # 50 tokens fit, so the call is made
    assert capped.prompt_sync("go").text == "ok"
    with pytest.raises(BudgetExceededError, match="lower the agent's max_tokens"):
        agent.replace(max_tokens=101).prompt_sync("go")
