"""Each multi-agent example runs on its own, fast, and prints what it promises."""

from __future__ import annotations

from collections.abc import Callable
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


def test_every_multiagent_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("multiagent_*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_prints_its_results(
    name: str, example_runs: Callable[[str], tuple[list[str], float]]
) -> None:
    lines, elapsed = example_runs(name)
    if name == "multiagent_supervisor.py":  # both delegations started before either finished
        assert lines.index("tech started: wifi drops") < lines.index("billing finished")
    # Each takes well under 2 s alone; three at once on a shared machine get some slack.
    assert elapsed < 6, f"{name} took {elapsed:.1f}s"
