"""Each orchestration example runs on its own, fast, and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
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


def test_every_orchestration_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("orchestration_*.py")) == sorted(EXPECTED)


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
    # Each takes well under 2 s alone; four at once on a shared CI machine get some slack.
    assert elapsed < 6, f"{name} took {elapsed:.1f}s"
