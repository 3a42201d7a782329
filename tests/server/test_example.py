"""examples/server_openai.py runs as a user would run it, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "server_openai.py"


def test_the_server_example_answers_over_every_api() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    answer = "It is sunny and 21 C in Lisbon."
    assert result.stdout.splitlines() == [
        f"/prompt: {answer} (2 model calls)",
        "/prompt/stream: tool_call_start tool_call_delta tool_call_end usage tool_result "
        "text_delta usage done",
        "/sessions/demo: 4 messages",
        f"openai: {answer}",
        f'openai stream: "{answer}"',
    ]
