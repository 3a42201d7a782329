"""Every code block of the documentation site runs (tests/docs/markdown.py says how).

Each page under ``docs/`` is read on its own: a ``<!-- continues: previous -->`` block continues
the block before it on the same page.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .markdown import (
    ROOT,
    Block,
    Example,
    check_daimon_command,
    daimon_commands,
    python_examples,
    read_page,
    run_example,
    services_named,
    slug,
)

PAGES = sorted((ROOT / "docs").rglob("*.md"))
BLOCKS: list[Block] = [block for page in PAGES for block in read_page(page)]
EXAMPLES: list[Example] = [
    example for page in PAGES for example in python_examples(read_page(page))
]


def _param(example: Example) -> object:
    block = example.block
    page = block.page.removeprefix("docs/").removesuffix(".md")
    marks = [pytest.mark.service(name) for name in services_named(example.source)]
    return pytest.param(example, id=f"{page}:{block.line}-{slug(block.heading)}", marks=marks)


@pytest.mark.parametrize("example", [_param(e) for e in EXAMPLES])
def test_python_block_runs(example: Example, tmp_path: Path, service_url: dict[str, str]) -> None:
    run_example(example, tmp_path, service_url)


def test_the_guides_have_examples_and_most_run() -> None:
    guides = {e.block.page for e in EXAMPLES if e.block.page.startswith("docs/guides/")}
    assert len(guides) >= 15, sorted(guides)
    run = [e for e in EXAMPLES if e.skip_reason is None]
    assert len(run) > len(EXAMPLES) * 2 / 3


@pytest.mark.parametrize("command", daimon_commands(BLOCKS))
def test_daimon_command_exists(command: str) -> None:
    check_daimon_command(command)
