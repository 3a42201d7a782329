"""Datasets from YAML, JSON Lines and JSON files, and the mistakes they are checked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daimon.eval import (
    Contains,
    DatasetError,
    EvalOutput,
    EvalRunner,
    Exact,
    FunctionScorer,
    JsonSchema,
    LLMJudge,
    Regex,
    ToolCalled,
    load_dataset,
)
from daimon.models import FunctionModel

from .support import quiz_agent

YAML = """
scenarios:
  - name: adds
    input: add 2 and 2
    tags: [math]
    metadata: {owner: qa}
    expect:
      contains: ["4", "sum"]
      regex: "\\\\b4\\\\b"
      tool_called: {name: add, arguments: {a: 2, b: 2}}
  - name: capital
    input: capital of France?
    expect:
      - exact: Paris
      - exact: " Paris "
      - judge: Names the capital.
  - name: json
    input: json please
    expect:
      json_schema: {type: object, required: [answer]}
      tool_called: [add, {name: search, exact: true}]
      scorer: tests.eval.test_dataset:short_answer
  - input: no name
"""


def short_answer(out: EvalOutput) -> bool:
    return len(out.text) < 40


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_yaml_dataset_builds_every_kind_of_expectation(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    judge = FunctionModel(lambda request: '{"score": 1}')
    adds, capital, json_scenario, unnamed = load_dataset(
        write(tmp_path, "d.yaml", YAML), judge=judge
    )
    assert adds.name == "adds"
    assert adds.input == "add 2 and 2"
    assert adds.tags == ("math",)
    assert adds.metadata == {"owner": "qa"}
    assert adds.expect == (
        Contains("4"),
        Contains("sum"),
        Regex(r"\b4\b"),
        ToolCalled("add", {"a": 2, "b": 2}),
    )
    assert capital.expect[:2] == (Exact("Paris"), Exact(" Paris "))
    (judge_scorer,) = capital.expect[2:]
    assert isinstance(judge_scorer, LLMJudge)
    assert judge_scorer.criteria == "Names the capital."
    assert judge_scorer.model is judge
    schema, add, search, custom = json_scenario.expect
    assert isinstance(schema, JsonSchema)
    assert (add, search) == (ToolCalled("add"), ToolCalled("search", exact=True))
    assert isinstance(custom, FunctionScorer) and custom.name == "short_answer"
    assert unnamed.name == "scenario-4"
    assert unnamed.expect == ()


async def test_a_yaml_dataset_runs(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    judge = FunctionModel(lambda request: '{"score": 0.9, "reason": "right"}')
    scenarios = load_dataset(write(tmp_path, "d.yml", YAML), judge=judge)
    agent, _ = quiz_agent()
    report = await EvalRunner(agent).run(scenarios)
    verdicts = {r.scenario: r.passed for r in report.results}
    assert verdicts == {"adds": True, "capital": True, "json": False, "scenario-4": True}
    assert report.result("json").failures == [  # type: ignore[union-attr]
        "tool_called:add: 'add' was not called (called: none)",
        "tool_called:search: 'search' was not called (called: none)",
    ]


def test_a_jsonl_dataset_has_one_scenario_per_line(tmp_path: Path) -> None:
    lines = [
        {"name": "capital", "input": "capital of France?", "expect": {"exact": "Paris"}},
        {"name": "adds", "input": "add 2 and 2", "expect": [{"contains": "4"}]},
    ]
    text = "\n".join(json.dumps(line) for line in lines[:1]) + "\n\n" + json.dumps(lines[1]) + "\n"
    capital, adds = load_dataset(write(tmp_path, "d.jsonl", text))
    assert (capital.name, capital.expect) == ("capital", (Exact("Paris"),))
    assert (adds.name, adds.expect) == ("adds", (Contains("4"),))


def test_a_json_dataset_is_a_list_or_a_scenarios_mapping(tmp_path: Path) -> None:
    entry = {"input": "hi", "expect": {"contains": "x"}}
    (listed,) = load_dataset(write(tmp_path, "a.json", json.dumps([entry])))
    (mapped,) = load_dataset(write(tmp_path, "b.json", json.dumps({"scenarios": [entry]})))
    assert listed == mapped


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("d.txt", "", "unknown dataset format"),
        ("d.jsonl", '{"input": "a"}\nnot json\n', r"d\.jsonl:2: not JSON"),
        ("d.jsonl", '{"inptu": "a"}\n', r"d\.jsonl:1: unknown field\(s\) \['inptu'\]"),
        ("d.jsonl", '{"name": "n"}\n', r"\('n'\): 'input' must be a string"),
        ("d.jsonl", '["a"]\n', "a scenario must be a mapping"),
        ("d.json", '{"input": "a"}', "expected a list of scenarios"),
        ("d.json", "{", "not JSON"),
        ("d.jsonl", '{"input": "a", "expect": {"smells_like": "x"}}\n', "unknown expectation"),
        ("d.jsonl", '{"input": "a", "expect": "x"}\n', "'expect' must be a mapping or a list"),
        ("d.jsonl", '{"input": "a", "expect": {"contains": 4}}\n', "expect.contains: must be"),
        ("d.jsonl", '{"input": "a", "expect": {"regex": "("}}\n', "bad regular expression"),
        ("d.jsonl", '{"input": "a", "expect": {"judge": "good"}}\n', "needs a judge model"),
        ("d.jsonl", '{"input": "a", "expect": {"json_schema": 3}}\n', "must be a JSON schema"),
        ("d.jsonl", '{"input": "a", "expect": {"tool_called": {"nam": "x"}}}\n', "tool name"),
        ("d.jsonl", '{"input": "a", "expect": {"scorer": "nope"}}\n', "not an import path"),
        ("d.jsonl", '{"input": "a", "expect": {"scorer": "no_such_mod:f"}}\n', "cannot import"),
        ("d.jsonl", '{"input": "a", "tags": "x"}\n', "'tags' must be a list of strings"),
        ("d.jsonl", '{"input": "a", "metadata": []}\n', "'metadata' must be a mapping"),
        (
            "d.jsonl",
            '{"name": "x", "input": "a"}\n{"name": "x", "input": "b"}\n',
            r"d\.jsonl:2: the name 'x' is used twice",
        ),
    ],
)
def test_dataset_mistakes_name_the_file_and_the_field(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    with pytest.raises(DatasetError, match=message):
        load_dataset(write(tmp_path, name, text))


def test_a_missing_file_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read the dataset"):
        load_dataset(tmp_path / "missing.jsonl")


def test_bad_yaml_is_a_dataset_error(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    with pytest.raises(DatasetError, match="not YAML"):
        load_dataset(write(tmp_path, "d.yaml", "- {input: [unclosed"))
