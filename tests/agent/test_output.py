"""Structured output: typed results validated, with errors sent back, with tools or without."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import pydantic
import pytest

from daimon import (
    Agent,
    BuilderError,
    ChatRequest,
    ChatResponse,
    OutputValidationError,
    Role,
    ToolCall,
    tool,
)
from daimon.models import FunctionModel, ScriptedModel


@dataclass
class City:
    name: str
    population: int


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


class Point(TypedDict):
    x: int
    y: int


@tool
def lookup(name: str) -> int:
    """Population of a city."""
    return {"Paris": 2_100_000}[name]


def answer(**arguments: Any) -> ToolCall:
    return ToolCall(id=f"out-{len(arguments)}", name="final_result", arguments=arguments)


async def test_output_tool_after_a_real_tool_call_gives_a_typed_value() -> None:
    model = ScriptedModel(
        [
            ChatResponse.tool_use(ToolCall(id="t1", name="lookup", arguments={"name": "Paris"})),
            ChatResponse.tool_use(answer(name="Paris", population=2_100_000)),
        ]
    )
    response = await Agent(model, tools=[lookup], output_type=City).prompt("Paris?")
    assert response.output == City(name="Paris", population=2_100_000)
    offered = [t.name for t in model.requests[0].tools]
    assert offered == ["lookup", "final_result"]
    assert model.requests[0].tools[1].parameters["required"] == ["name", "population"]
    # every call in the history has its result, so the conversation stays valid
    assert [m.role for m in response.messages][-1] is Role.TOOL


async def test_invalid_output_is_sent_back_and_corrected() -> None:
    model = ScriptedModel(
        [
            ChatResponse.tool_use(answer(city="Oslo", celsius="cold")),
            ChatResponse.tool_use(answer(city="Oslo", celsius=-3.5)),
        ]
    )
    response = await Agent(model, output_type=Weather).prompt("weather?")
    assert response.output == Weather(city="Oslo", celsius=-3.5)
    feedback = model.requests[1].messages[-1]
    assert feedback.role is Role.TOOL and feedback.is_error
    assert "celsius" in feedback.text


async def test_output_that_never_validates_fails_after_the_retries() -> None:
    model = FunctionModel(lambda r: ChatResponse.tool_use(answer(x="one", y=2)))
    with pytest.raises(OutputValidationError) as info:
        await Agent(model, output_type=Point, output_retries=2).prompt("point?")
    assert info.value.attempts == 3
    assert "x" in info.value.errors[0]


async def test_a_plain_json_text_answer_is_accepted_and_prose_is_asked_again() -> None:
    model = ScriptedModel(["Sure! The point is at one, two.", '```json\n{"x": 1, "y": 2}\n```'])
    response = await Agent(model, output_type=Point).prompt("point?")
    assert response.output == {"x": 1, "y": 2}
    retry = model.requests[1].messages[-1]
    assert retry.role is Role.USER and "final_result" in retry.text


async def test_native_json_schema_output_for_models_that_support_it() -> None:
    requests: list[ChatRequest] = []

    def respond(request: ChatRequest) -> ChatResponse:
        requests.append(request)
        if len(requests) == 1:
            return ChatResponse.reply('{"result": ["a", 2]}')
        return ChatResponse.reply('{"result": ["a", "b"]}')

    model = FunctionModel(respond, supports_json_schema=True)
    response = await Agent(model, output_type=list[str]).prompt("letters?")
    assert response.output == ["a", "b"]
    assert requests[0].response_format is not None
    assert requests[0].response_format.schema["properties"]["result"]["type"] == "array"
    assert [t.name for t in requests[0].tools] == []
    assert "JSON" in requests[1].messages[-1].text


def test_an_output_type_without_a_schema_is_a_builder_error() -> None:
    with pytest.raises(BuilderError, match="output_type"):
        Agent(ScriptedModel([]), output_type=object())


async def test_streaming_ends_with_the_typed_output() -> None:
    model = ScriptedModel([ChatResponse.tool_use(answer(x=3, y=4))])
    events = [e async for e in Agent(model, output_type=Point).prompt_stream("p")]
    assert events[-1].response.output == {"x": 3, "y": 4}  # type: ignore[union-attr]
