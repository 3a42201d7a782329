"""The README's examples run (tests/docs/markdown.py says how blocks are run or marked)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .markdown import (
    ROOT,
    Example,
    check_daimon_command,
    daimon_commands,
    param,
    python_examples,
    read_page,
    run_example,
)

README = ROOT / "README.md"
BLOCKS = read_page(README)
EXAMPLES = python_examples(BLOCKS)


@pytest.mark.parametrize("example", [param(e, n) for n, e in enumerate(EXAMPLES)])
def test_python_block_runs(example: Example, tmp_path: Path, service_url: dict[str, str]) -> None:
    run_example(example, tmp_path, service_url)


def test_every_python_block_is_run_or_says_why() -> None:
    # python_examples raised at import on a bad directive; here: the README has examples, one
    # per major part, and most of them run
    assert len(EXAMPLES) >= 8
    run = [e for e in EXAMPLES if e.skip_reason is None]
    assert len(run) > len(EXAMPLES) / 2


def test_the_readme_names_daimon_commands() -> None:
    assert {"worker", "serve", "mcp serve", "a2a serve", "eval"} <= set(daimon_commands(BLOCKS))


@pytest.mark.parametrize("command", daimon_commands(BLOCKS))
def test_daimon_command_exists(command: str) -> None:
    check_daimon_command(command)


QUICK_START = (
    "./scripts/demo     # installs daimon-agents[local,cli] and a 135M-parameter model, then it "
    "answers (no API key)\n"
    "./scripts/test     # format, lint, types, import boundaries, then the whole test suite\n"
)


def test_the_quick_start_is_the_two_commands() -> None:
    (block,) = [b for b in BLOCKS if b.heading == "Quick start" and b.language == "bash"]
    assert block.code == QUICK_START


def test_the_readme_links_to_existing_guides() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?:docs/)[^)#]+\.md)\)", text)
    assert len(links) >= 20
    missing = sorted({link for link in links if not (ROOT / link).is_file()})
    assert not missing, f"the README links to pages that do not exist: {missing}"
    assert "\n## Guides\n" in text
