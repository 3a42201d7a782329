"""The block reader and its directives (tests/docs/markdown.py)."""

from __future__ import annotations

import pytest

from .markdown import daimon_commands, expected_lines, python_examples, read_blocks


def test_a_block_with_a_bad_directive_fails() -> None:
    text = "## A\n\n<!-- not run -->\n```python\nprint(1)\n```\n"
    with pytest.raises(AssertionError, match="needs a reason"):
        python_examples(read_blocks(text))
    text = "## A\n\n<!-- skip this -->\n```python\nprint(1)\n```\n"
    with pytest.raises(AssertionError, match="unknown directive"):
        python_examples(read_blocks(text))
    text = "## A\n\n<!-- continues: previous -->\n```python\nprint(1)\n```\n"
    with pytest.raises(AssertionError, match="there is none"):
        python_examples(read_blocks(text))


def test_a_continued_block_runs_after_the_one_before() -> None:
    text = (
        "## A\n\n```python\nx = 1\n```\n\n## B\n\n<!-- continues: previous -->\n"
        "```python\nprint(x)  # -> 1\n```\n"
    )
    first, second = python_examples(read_blocks(text))
    assert first.source == "x = 1\n"
    assert second.source == "x = 1\n\nprint(x)  # -> 1\n"
    assert second.block.heading == "B"
    assert expected_lines(second.block.code) == ["1"]


def test_an_unclosed_block_names_its_page_and_line() -> None:
    with pytest.raises(AssertionError, match=r"docs/x\.md:3: the block is never closed"):
        read_blocks("# X\n\n```python\nprint(1)\n", "docs/x.md")


def test_shell_blocks_name_daimon_commands() -> None:
    text = "```bash\ndaimon broker serve grpc --db x  # daimon chat\nFOO=1 daimon worker a:b\n```\n"
    assert daimon_commands(read_blocks(text)) == ["broker serve", "worker"]
