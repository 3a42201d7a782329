"""Each example runs as a user would run it, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_quickstart_calls_both_tools_and_answers() -> None:
    assert run_example("quickstart.py").splitlines() == [
        '-> add({"a":2,"b":3})',
        "<- 5",
        '-> multiply({"a":5.0,"b":4})',
        "<- 20.0",
        "(2 + 3) x 4 = 20.0",
    ]
