"""Each orchestration example runs on its own, fast, and prints what it promises."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"

EXPECTED = {
    "orchestration_chain.py": [
        "outline: 1. What owls are 2. Why they matter",
        "result: Owls are night hunters. They keep rodents in check. (9 words)",
        "steps: outliner, writer, count",
        "usage: 42 in, 20 out, 2 requests",
    ],
    "orchestration_graph.py": [
        "  write --[revise]--> write",
        "first run: node 'search_papers' failed: ConnectionError: paper index unreachable",
        "calls after the crash: {'plan': 1, 'search_papers': 1, 'search_web': 1}",
        "calls in total: {'plan': 1, 'search_papers': 2, 'search_web': 1, 'write': 2}",
        "notes: ['plan: owls', 'web: 3 articles', 'papers: 2 studies']",
        "drafts: ['draft v1', 'draft v2']",
        "usage: 140 tokens over 4 supersteps",
    ],
    "orchestration_dag.py": [
        "  forum --> moderate",
        "merge: owls spotted downtown; owls hunt at night",
        "summary: 2 facts agree",
        "failed: {'forum': \"ConnectionError('forum is down')\"}",
        "skipped: ['moderate']",
        "usage: 44 tokens",
    ],
    "orchestration_workflow.py": [
        "  measure --[reading_seconds]--> publish",
        "headline = 'Owls Hunt At'",
        "long_read = False",
        "usage: 30 tokens",
        "refused: workflow field 'headline': count_as_headline produces int but publish needs str",
    ],
}


def test_every_orchestration_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("orchestration_*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_prints_its_results(
    name: str, example_runs: Callable[[str], tuple[list[str], float]]
) -> None:
    _, elapsed = example_runs(name)
    # Each takes well under 2 s alone; four at once on a shared CI machine get some slack.
    assert elapsed < 6, f"{name} took {elapsed:.1f}s"
