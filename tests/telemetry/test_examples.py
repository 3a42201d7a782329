"""The telemetry example runs on its own, as a user would run it, and prints its span tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_telemetry_spans_example_prints_the_span_tree() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "telemetry_spans.py")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "A note on owls: Owls hunt at night.",
        "invoke_agent writer  (230 tokens in)",
        "  chat large  (100 tokens in)",
        "  execute_tool research",
        "    invoke_agent researcher  (30 tokens in)",
        "      chat small  (30 tokens in)",
        "  chat large  (100 tokens in)",
    ]
