"""The eval example runs on its own, as a user would run it, and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_eval_quiz_example_reports_the_regression() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "eval_quiz.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "quiz-v1: 4/4 passed, cost $0.001400",
        "quiz-v2: 2/4 passed, cost $0.001400",
        "regression: capital: now fails: exact:'Paris': expected 'Paris', got 'Lyon'",
        "regression: judged: now fails: judge: no",
    ]
