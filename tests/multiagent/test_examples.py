"""Each multi-agent example runs on its own, fast, and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"

EXPECTED = {
    "multiagent_agent_tool.py": [
        "research: Facts on owls: they hunt at night; they swallow prey whole.",
        "archive: Error: agent 'archive' failed: ConnectionError: archive service unreachable",
        "answer: Owls: they hunt at night; they swallow prey whole.",
        "usage: 500 in, 80 out, 3 requests",
        "cost: $0.000820",
    ],
    "multiagent_supervisor.py": [
        "billing started: refund #7",
        "tech started: wifi drops",
        "billing finished",
        "tech finished",
        "output: Resolution(teams=['billing', 'tech'], "
        "summary='refund of $12 issued / router firmware updated', refund=True)",
        "usage: 500 in, 80 out, 4 requests",
        "cost: $0.000820",
    ],
    "multiagent_handoff.py": [
        "handoff: Transferred to billing.",
        "billing saw: user: I was charged twice | assistant: Let me get billing for you. | "
        "user: [handoff] The triage agent handed this c",
        "billing answered: I refunded the duplicate charge.",
        "handoffs: [('triage', 'billing', 'a double charge')]",
        "usage: 2 requests, 240 tokens",
        "billing answered: Refunds take 3 days.",
    ],
}


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, tuple[subprocess.Popen[str], float]]]:
    """Every example, started at once (they are independent), so the module takes one run's time."""
    started = {
        name: (
            subprocess.Popen(
                [sys.executable, str(EXAMPLES / name)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
            time.perf_counter(),
        )
        for name in sorted(EXPECTED)
    }
    yield started
    for process, _ in started.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_every_multiagent_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("multiagent_*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_prints_its_results(
    name: str, runs: dict[str, tuple[subprocess.Popen[str], float]]
) -> None:
    process, started = runs[name]
    stdout, stderr = process.communicate(timeout=30)
    elapsed = time.perf_counter() - started
    assert process.returncode == 0, stderr
    assert stderr == ""
    lines = stdout.splitlines()
    missing = [line for line in EXPECTED[name] if line not in lines]
    assert not missing, f"{name} did not print {missing}; it printed:\n{stdout}"
    if name == "multiagent_supervisor.py":  # both delegations started before either finished
        assert lines.index("tech started: wifi drops") < lines.index("billing finished")
    # Each takes well under 2 s alone; three at once on a shared machine get some slack.
    assert elapsed < 6, f"{name} took {elapsed:.1f}s"
