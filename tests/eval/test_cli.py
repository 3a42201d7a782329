"""run_eval_cli: the exit code gates CI on the pass rate and on regressions."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from daimon.eval import EvalReport, run_eval_cli

from .support import quiz_agent

LINES = [
    {"name": "capital", "input": "capital of France?", "expect": {"exact": "Paris"}},
    {"name": "adds", "input": "add 2 and 2", "expect": {"tool_called": "add", "contains": "4"}},
    {"name": "unknown", "input": "who am I?", "expect": {"contains": "you are"}},
]


def dataset(tmp_path: Path, lines: list[dict[str, object]] = LINES) -> Path:
    path = tmp_path / "dataset.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def run(tmp_path: Path, *args: object, **options: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    agent, _ = quiz_agent()
    code = run_eval_cli(
        args[0] if args else dataset(tmp_path),
        agent,
        stdout=out,
        stderr=err,
        **options,  # type: ignore[arg-type]
    )
    return code, out.getvalue(), err.getvalue()


def test_every_scenario_passing_exits_0_and_writes_the_report(tmp_path: Path) -> None:
    path = dataset(tmp_path, LINES[:2])
    code, out, err = run(tmp_path, path, report_path=tmp_path / "report.json", concurrency=2)
    assert code == 0
    assert "**2/2 passed** (100%)" in out
    assert "[2/2] PASS" in err
    report = EvalReport.load(tmp_path / "report.json")
    assert [r.passed for r in report.results] == [True, True]


def test_a_pass_rate_below_the_threshold_exits_1(tmp_path: Path) -> None:
    code, out, err = run(tmp_path, report_path=tmp_path / "report.md")
    assert code == 1
    assert "pass rate 67% is below the threshold 100%" in err
    saved = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert saved.startswith("# Eval report: quiz") and saved in out


def test_a_pass_rate_at_the_threshold_exits_0(tmp_path: Path) -> None:
    assert run(tmp_path, threshold=0.6)[0] == 0
    assert run(tmp_path, threshold=0.7)[0] == 1


def test_a_regression_against_the_baseline_exits_1(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    assert run(tmp_path, dataset(tmp_path, LINES[:2]), report_path=baseline)[0] == 0
    changed = [LINES[0], {**LINES[1], "expect": {"contains": "5"}}]  # "adds" now fails
    code, out, _ = run(tmp_path, dataset(tmp_path, changed), threshold=0.5, baseline_path=baseline)
    assert code == 1
    assert "- adds: now fails: contains:'5': '5' not in the answer" in out
    assert run(tmp_path, dataset(tmp_path, LINES[:2]), baseline_path=baseline)[0] == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold": 1.5}, "the threshold must be between 0 and 1"),
        ({"report_path": "report.txt"}, "cannot tell the report format"),
        ({"concurrency": 0}, "concurrency must be a positive integer"),
        ({"baseline_path": "missing.json"}, "cannot read the baseline"),
    ],
)
def test_usage_errors_exit_2_before_anything_runs(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    code, out, err = run(tmp_path, **options)
    assert code == 2
    assert out == ""
    assert err.startswith("daimon eval: ") and message in err


def test_a_bad_dataset_exits_2(tmp_path: Path) -> None:
    code, _, err = run(tmp_path, tmp_path / "missing.yaml")
    assert code == 2
    assert "cannot read the dataset" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": 1}\n', encoding="utf-8")
    assert run(tmp_path, bad)[0] == 2


def test_a_report_that_cannot_be_written_exits_2(tmp_path: Path) -> None:
    code, _, err = run(tmp_path, report_path=tmp_path / "no" / "such" / "dir" / "r.json")
    assert code == 2
    assert "cannot write the report" in err


async def test_it_refuses_to_run_inside_an_event_loop(tmp_path: Path) -> None:
    code, _, err = run(tmp_path)
    assert code == 2
    assert "inside an event loop" in err
