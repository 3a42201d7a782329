"""Reports: JSON that reads back, Markdown and HTML to read, and comparisons listing regressions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daimon import SerializationError, Usage
from daimon.eval import EvalReport, EvalResult, ScorerResult, compare_reports


def result(name: str, passed: bool, score: float | None = None, **extra: object) -> EvalResult:
    value = score if score is not None else (1.0 if passed else 0.0)
    scores = (
        ()
        if passed
        else (ScorerResult(name="contains:'4'", value=0.0, passed=False, reason="'4' not in it"),)
    )
    return EvalResult(
        scenario=name,
        input=f"input of {name}",
        passed=passed,
        score=value,
        latency=0.5,
        cost=0.001,
        usage=Usage(input_tokens=10, output_tokens=2, requests=1),
        output="answer | with a pipe",
        scores=scores,
        **extra,  # type: ignore[arg-type]
    )


REPORT = EvalReport(
    name="quiz",
    created_at="2025-01-01T00:00:00+00:00",
    duration=1.5,
    results=(
        result("adds", True, tags=("math",), metadata={"owner": "qa"}),
        result("capital", False),
        result("crash", False, error="ModelError: down"),
        EvalResult(
            scenario="<script>",
            input="x",
            passed=False,
            score=0.0,
            latency=2.0,
            scores=(ScorerResult(name="judge", value=0.0, passed=False, error="ValueError: bad"),),
        ),
    ),
)


def test_totals() -> None:
    assert (REPORT.total, REPORT.passed, REPORT.failed) == (4, 1, 3)
    assert REPORT.pass_rate == 0.25
    assert REPORT.mean_score == 0.25
    assert REPORT.cost == pytest.approx(0.003)
    assert REPORT.mean_latency == pytest.approx((0.5 * 3 + 2.0) / 4)
    assert REPORT.p95_latency == 2.0
    assert EvalReport(name="empty", results=()).pass_rate == 1.0


def test_json_reads_back_as_the_same_report(tmp_path: Path) -> None:
    data = json.loads(REPORT.to_json())
    assert data["format"] == "daimon.eval.report"
    assert data["version"] == 1
    assert data["summary"]["passed"] == 1
    assert data["results"][0]["usage"] == {
        "input_tokens": 10,
        "output_tokens": 2,
        "cached_tokens": 0,
        "requests": 1,
    }
    assert EvalReport.from_json(REPORT.to_json()) == REPORT
    path = REPORT.save(tmp_path / "report.json")
    assert EvalReport.load(path) == REPORT


@pytest.mark.parametrize(
    "text",
    ["[]", "{}", '{"format": "daimon.eval.report", "version": 9, "results": []}', "nope"],
)
def test_a_file_that_is_not_a_report_is_refused(text: str) -> None:
    with pytest.raises(SerializationError, match="cannot read eval report"):
        EvalReport.from_json(text)


def test_markdown_has_the_totals_and_a_row_per_scenario() -> None:
    text = REPORT.to_markdown()
    lines = text.splitlines()
    assert lines[0] == "# Eval report: quiz"
    assert lines[2].startswith("**1/4 passed** (25%), mean score 0.25, cost $0.003000")
    assert lines[4] == "| Scenario | Result | Score | Latency | Cost | Details |"
    assert lines[6] == "| adds | PASS | 1.00 | 0.50s | $0.001000 |  |"
    assert lines[7] == "| capital | FAIL | 0.00 | 0.50s | $0.001000 | contains:'4': '4' not in it |"
    assert lines[8].startswith("| crash | FAIL | 0.00 | 0.50s | $0.001000 | run failed: ModelError")
    assert "judge: scorer error: ValueError: bad" in lines[9]


def test_html_escapes_what_it_shows(tmp_path: Path) -> None:
    page = REPORT.save(tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>")
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert "<b>1/4 passed</b>" in page


def test_save_picks_the_format_by_suffix(tmp_path: Path) -> None:
    assert REPORT.save(tmp_path / "r.md").read_text(encoding="utf-8") == REPORT.to_markdown()
    with pytest.raises(ValueError, match=r"use \.json, \.md or \.html"):
        REPORT.save(tmp_path / "r.txt")


def test_comparing_reports_lists_the_regressions() -> None:
    baseline = EvalReport(
        name="before",
        results=(
            result("stays", True),
            result("breaks", True),
            result("fixed", False),
            result("slips", True, score=0.9),
            result("wobbles", True, score=0.9),
            result("dropped", True),
        ),
    )
    current = EvalReport(
        name="after",
        results=(
            result("stays", True),
            result("breaks", False),
            result("fixed", True),
            result("slips", True, score=0.6),
            result("wobbles", True, score=0.85),
            result("new", False),
        ),
    )
    comparison = compare_reports(baseline, current)
    assert [(r.scenario, r.reason) for r in comparison.regressions] == [
        ("breaks", "now fails: contains:'4': '4' not in it"),
        ("slips", "score 0.90 -> 0.60"),
    ]
    assert comparison.regressions[0].before.passed and not comparison.regressions[0].after.passed
    assert comparison.improvements == ("fixed",)
    assert comparison.removed == ("dropped",)
    assert comparison.added == ("new",)
    assert not comparison.ok
    text = comparison.to_markdown()
    assert "**2 regression(s):**" in text
    assert "- breaks: now fails" in text
    assert "Now passing: fixed" in text
    assert compare_reports(baseline, current, score_tolerance=0.5).regressions[1:] == ()
    same = compare_reports(baseline, baseline)
    assert same.ok and "No regressions." in same.to_markdown()
