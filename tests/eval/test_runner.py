"""EvalRunner on FunctionModel agents: known passes and failures, errors reported, not raised."""

from __future__ import annotations

import io

import pytest

from daimon import BuilderError
from daimon.eval import (
    Contains,
    EvalOutput,
    EvalResult,
    EvalRunner,
    EvalScenario,
    Exact,
    JsonSchema,
    ToolCalled,
    console_progress,
    scorer,
)

from .support import CALL_COST, quiz_agent


@scorer
def broken(out: EvalOutput) -> bool:
    raise KeyError("no such field")


SCENARIOS = [
    EvalScenario(
        name="adds",
        input="add 2 and 2",
        expect=(Contains("4"), ToolCalled("add", {"a": 2, "b": 2})),
        tags=("math",),
    ),
    EvalScenario(name="capital", input="capital of France?", expect=(Exact("Paris"),)),
    EvalScenario(
        name="json",
        input="json please",
        expect=(JsonSchema({"type": "object", "required": ["answer"]}),),
    ),
    EvalScenario(name="wrong", input="capital of France?", expect=(Exact("Lyon"), Contains("P"))),
    EvalScenario(name="scorer raises", input="capital of France?", expect=(broken,)),
    EvalScenario(name="run fails", input="boom", expect=(Contains("x"),)),
    EvalScenario(name="no expectations", input="anything"),
]


async def test_known_passes_and_failures_with_latency_cost_and_score() -> None:
    agent, _ = quiz_agent()
    report = await EvalRunner(agent).run(SCENARIOS)
    assert report.name == "quiz"
    assert [r.scenario for r in report.results] == [s.name for s in SCENARIOS]  # in order
    by_name = {r.scenario: r for r in report.results}
    assert {n for n, r in by_name.items() if r.passed} == {
        "adds",
        "capital",
        "json",
        "no expectations",
    }
    adds = by_name["adds"]
    assert adds.output == "The sum is 4."
    assert adds.score == 1.0
    assert adds.cost == pytest.approx(2 * CALL_COST)
    assert adds.usage.requests == 2
    assert adds.latency > 0
    assert adds.tags == ("math",)
    wrong = by_name["wrong"]
    assert wrong.score == 0.5  # one of two scorers passed
    assert wrong.failures == ["exact:'Lyon': expected 'Lyon', got 'Paris'"]
    assert by_name["no expectations"].score == 1.0
    assert report.total == 7 and report.passed == 4 and report.failed == 3
    assert report.pass_rate == pytest.approx(4 / 7)
    assert report.cost == pytest.approx(7 * CALL_COST)  # the failed run's cost is unknown
    assert report.created_at.endswith("+00:00")


async def test_a_scorer_that_raises_fails_its_scenario_and_says_why() -> None:
    agent, _ = quiz_agent()
    report = await EvalRunner(agent).run(SCENARIOS)
    result = report.result("scorer raises")
    assert result is not None and not result.passed
    (score,) = result.scores
    assert score.error == "KeyError: 'no such field'"
    assert result.failures == ["broken: scorer error: KeyError: 'no such field'"]


async def test_a_failed_run_is_a_failed_scenario() -> None:
    agent, _ = quiz_agent()
    result = await EvalRunner(agent).run_one(SCENARIOS[5])
    assert not result.passed
    assert result.score == 0.0
    assert result.error == "ModelError: the provider is down"
    assert result.scores == ()


async def test_a_run_past_its_timeout_fails_its_scenario() -> None:
    agent, _ = quiz_agent()
    scenario = EvalScenario(name="slow", input="slow question")
    result = await EvalRunner(agent, timeout=0.05).run_one(scenario)
    assert result.error == "timed out after 0.05s"
    assert not result.passed


async def test_at_most_concurrency_scenarios_run_at_once() -> None:
    agent, quiz = quiz_agent(delay=0.01)
    scenarios = [EvalScenario(name=f"s{i}", input="capital?") for i in range(9)]
    seen: list[tuple[str, int, int]] = []

    def progress(result: EvalResult, done: int, total: int) -> None:
        seen.append((result.scenario, done, total))

    report = await EvalRunner(agent, concurrency=3, progress=progress).run(scenarios)
    assert quiz.most == 3
    assert report.passed == 9
    assert [(done, total) for _, done, total in seen] == [(i, 9) for i in range(1, 10)]
    assert sorted(name for name, _, _ in seen) == sorted(s.name for s in scenarios)


async def test_an_error_in_the_progress_callback_surfaces_as_itself() -> None:
    agent, _ = quiz_agent()

    def progress(result: EvalResult, done: int, total: int) -> None:
        raise RuntimeError("display broke")

    with pytest.raises(RuntimeError, match="display broke"):
        await EvalRunner(agent, progress=progress).run(SCENARIOS[:2])


async def test_scenario_names_must_be_unique() -> None:
    agent, _ = quiz_agent()
    twice = [EvalScenario(name="a", input="x"), EvalScenario(name="a", input="y")]
    with pytest.raises(BuilderError, match=r"repeated: \['a'\]"):
        await EvalRunner(agent).run(twice)


def test_runner_options_are_checked() -> None:
    agent, _ = quiz_agent()
    with pytest.raises(BuilderError, match="concurrency"):
        EvalRunner(agent, concurrency=0)
    with pytest.raises(BuilderError, match="timeout"):
        EvalRunner(agent, timeout=-1)
    with pytest.raises(BuilderError, match="prompt"):
        EvalRunner(object())  # type: ignore[arg-type]


async def test_plain_progress_prints_a_line_per_scenario() -> None:
    agent, _ = quiz_agent()
    stream = io.StringIO()
    await EvalRunner(agent, concurrency=1, progress=console_progress(stream)).run(SCENARIOS[2:4])
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[1/2] PASS json (score 1.00, ")
    assert lines[1].startswith("[2/2] FAIL wrong (score 0.50, ")
    assert lines[2] == "    exact:'Lyon': expected 'Lyon', got 'Paris'"


async def test_rich_progress_draws_a_bar_and_lists_failures() -> None:
    pytest.importorskip("rich")
    agent, _ = quiz_agent()
    stream = io.StringIO()
    progress = console_progress(stream, rich=True)
    await EvalRunner(agent, concurrency=1, progress=progress).run(SCENARIOS[2:4])
    text = stream.getvalue()
    assert "FAIL wrong: exact:'Lyon'" in text
    assert "2/2" in text


def test_console_progress_is_plain_on_a_stream_that_is_not_a_terminal() -> None:
    progress = console_progress(io.StringIO())
    assert type(progress).__name__ == "_PlainProgress"
