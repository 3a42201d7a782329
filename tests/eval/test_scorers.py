"""Each scorer passes what it should and fails the rest, saying why."""

from __future__ import annotations

import re
from typing import Any

import pytest

from daimon import AgentResponse, BuilderError, ChatRequest, ChatResponse, Message, ToolCall
from daimon.eval import (
    Contains,
    EvalOutput,
    EvalScenario,
    Exact,
    FunctionScorer,
    JsonSchema,
    LLMJudge,
    Regex,
    Score,
    Scorer,
    ToolCalled,
    scorer,
)
from daimon.models import FunctionModel

SCENARIO = EvalScenario(name="s", input="What is 2 + 2?")


def output(text: str, *calls: ToolCall) -> EvalOutput:
    messages = (Message.assistant("", calls), Message.assistant(text)) if calls else ()
    return EvalOutput(scenario=SCENARIO, response=AgentResponse(text=text, messages=messages))


async def verdict(s: Scorer, text: str, *calls: ToolCall) -> Score:
    return await s.score(output(text, *calls))


async def test_contains() -> None:
    assert (await verdict(Contains("4"), "It is 4.")).passed
    failed = await verdict(Contains("four"), "It is 4.")
    assert (failed.passed, failed.value, failed.reason) == (False, 0.0, "'four' not in the answer")
    assert (await verdict(Contains("PARIS", case_sensitive=False), "paris")).passed
    assert Contains("4").name == "contains:'4'"


async def test_regex() -> None:
    assert (await verdict(Regex(r"\b4\b"), "It is 4.")).passed
    assert not (await verdict(Regex(r"^\d+$"), "It is 4.")).passed
    assert (await verdict(Regex("it is", flags=re.IGNORECASE), "It is 4.")).passed
    with pytest.raises(BuilderError, match="bad regular expression"):
        Regex("(")


async def test_exact() -> None:
    assert (await verdict(Exact("Paris"), "  Paris\n")).passed
    assert not (await verdict(Exact("Paris", strip=False), " Paris")).passed
    assert (await verdict(Exact("paris", case_sensitive=False), "Paris")).passed
    failed = await verdict(Exact("Paris"), "Lyon")
    assert failed.reason == "expected 'Paris', got 'Lyon'"


async def test_json_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    check = JsonSchema(schema)
    assert (await verdict(check, '{"answer": 4}')).passed
    assert (await verdict(check, '```json\n{"answer": 4}\n```')).passed  # a fenced block
    wrong = await verdict(check, '{"answer": "four"}')
    assert not wrong.passed and "does not match the schema" in wrong.reason
    not_json = await verdict(check, "four")
    assert not not_json.passed and not_json.reason.startswith("not JSON")
    with pytest.raises(BuilderError, match="bad JSON schema"):
        JsonSchema({"type": "no-such-type"})


async def test_tool_called() -> None:
    add = ToolCall(id="1", name="add", arguments={"a": 2, "b": 2, "note": "x"})
    assert (await verdict(ToolCalled("add"), "4", add)).passed
    assert (await verdict(ToolCalled("add", {"a": 2}), "4", add)).passed  # a subset is enough
    assert not (await verdict(ToolCalled("add", {"a": 2}, exact=True), "4", add)).passed
    assert (
        await verdict(ToolCalled("add", {"a": 2, "b": 2, "note": "x"}, exact=True), "4", add)
    ).passed
    wrong = await verdict(ToolCalled("add", {"a": 3}), "4", add)
    assert not wrong.passed and "was called with" in wrong.reason
    missing = await verdict(ToolCalled("search"), "4", add)
    assert missing.reason == "'search' was not called (called: ['add'])"
    assert (await verdict(ToolCalled("add"), "4")).reason == "'add' was not called (called: none)"


async def test_function_scorers_read_bools_floats_and_scores() -> None:
    @scorer
    def short(out: EvalOutput) -> bool:
        return len(out.text) < 5

    async def half(out: EvalOutput) -> float:
        return 0.5

    assert short.name == "short"
    assert (await verdict(short, "4")).passed
    assert not (await verdict(short, "a long answer")).passed
    assert (await verdict(FunctionScorer(half), "4")).passed  # 0.5 passes the default threshold
    strict = FunctionScorer(half, name="strict", threshold=0.9)
    assert (await verdict(strict, "4")) == Score(value=0.5, passed=False)
    custom = FunctionScorer(lambda out: Score(value=0.7, passed=True, reason="ok"))
    assert (await verdict(custom, "4")).reason == "ok"
    with pytest.raises(TypeError, match="return a bool, a float from 0 to 1 or a Score"):
        await verdict(FunctionScorer(lambda out: "yes"), "4")  # type: ignore[arg-type,return-value]
    with pytest.raises(BuilderError):
        FunctionScorer(half, threshold=2)


def judge_model(reply: str, seen: list[ChatRequest] | None = None) -> FunctionModel:
    def answer(request: ChatRequest) -> ChatResponse:
        if seen is not None:
            seen.append(request)
        return ChatResponse.reply(reply)

    return FunctionModel(answer)


async def test_llm_judge_asks_the_model_and_reads_its_score() -> None:
    seen: list[ChatRequest] = []
    judge = LLMJudge(judge_model('{"score": 0.8, "reason": "correct"}', seen), "Says 4.")
    result = await verdict(judge, "It is 4.")
    assert result == Score(value=0.8, passed=True, reason="correct")
    prompt = seen[0].messages[0].text
    assert "Criterion: Says 4." in prompt
    assert "Question: What is 2 + 2?" in prompt
    assert "Answer: It is 4." in prompt
    low = LLMJudge(judge_model('Sure! ```json\n{"score": 0.2, "reason": "wrong"}\n```'), "x")
    assert (await verdict(low, "5")).passed is False
    clamped = LLMJudge(judge_model('{"score": 7}'), "x", threshold=0.9)
    assert (await verdict(clamped, "4")).value == 1.0


@pytest.mark.parametrize("reply", ["I think it is fine", '{"reason": "no score"}', "{bad json}"])
async def test_a_judge_reply_without_a_score_is_an_error(reply: str) -> None:
    with pytest.raises(ValueError, match="the judge gave no score"):
        await verdict(LLMJudge(judge_model(reply), "x"), "4")


def test_llm_judge_is_checked_when_built() -> None:
    with pytest.raises(BuilderError, match="needs criteria"):
        LLMJudge(judge_model("{}"), " ")
    with pytest.raises(BuilderError, match="Model or a model string"):
        LLMJudge(object(), "x")  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="threshold"):
        LLMJudge(judge_model("{}"), "x", threshold=-1)


def test_scenarios_are_checked_when_built() -> None:
    scenario = EvalScenario(name="n", input="i", expect=[Contains("4")], tags=["a"])  # type: ignore[arg-type]
    assert scenario.expect == (Contains("4"),)
    assert scenario.tags == ("a",)
    bad: list[dict[str, Any]] = [
        {"name": "", "input": "i"},
        {"name": "n", "input": 3},
        {"name": "n", "input": "i", "expect": (lambda out: True,)},
    ]
    for kwargs in bad:
        with pytest.raises(BuilderError):
            EvalScenario(**kwargs)


def test_score_values_are_between_0_and_1() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        Score(value=1.5, passed=True)
