"""Run the code blocks of a Markdown page: the README's and every page of the documentation site.

Every ```python block runs as a program of its own (a file, ``_example.py``), in a fresh
interpreter whose working directory is a temporary folder, and must exit 0. An HTML comment on
the line right before a block's fence changes that:

- ``<!-- not run: why -->``: the block is not run (an API key, a cloud service, a server that
  never stops); the reason is required. Its imports are still checked.
- ``<!-- continues: previous -->``: the block runs after the previous block, as one program.

Any other comment there, or a ``not run`` with no reason, fails. A line ``print(...)  # -> text``
asserts that the program printed the line ``text``. Local services (Redis, NATS, ...) are the ones
``tests/conftest.py`` knows; a block that names one is marked with ``service``. The ```bash
blocks' ``daimon <command>`` lines are checked by running ``daimon <command> --help``. Blocks in
other languages (YAML, plain text) are shown, not run.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

TIMEOUT = 50.0
"""Seconds one block may run (the slowest load the local model, a few seconds each)."""

ENVIRONMENT = {
    # no OTLP collector runs here: configure_otlp sets its providers up but exports nothing
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "none",
}

_FENCE = re.compile(r"^```(\w*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*(.*?)\s*-->$")
_EXPECTED = re.compile(r"^\s*print\(.*\)\s*#\s*->\s*(.+?)\s*$")
_COMMAND = re.compile(r"(?:^|\s)daimon((?:\s+[a-z][a-z0-9-]*)+)")
_URL_SERVICES = {"redis": "redis", "nats": "nats", "amqp": "rabbitmq", "postgresql": "postgres"}
"""URL scheme -> the service (as tests/conftest.py names it) a block that uses it needs."""
_LOCAL_URLS = {"redis": "redis://127.0.0.1:6379", "nats": "nats://127.0.0.1:4222"}
"""The local service URLs the pages' programs use, by service."""
SHELLS = ("bash", "sh", "shell", "console")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    language: str
    code: str
    heading: str
    line: int
    directive: str | None
    """The HTML comment on the line before the fence, without ``<!--``/``-->``."""
    page: str = "README.md"
    """The page, relative to the repository root."""

    @property
    def where(self) -> str:
        """``page:line (heading)``, for messages."""
        return f"{self.page}:{self.line} ({self.heading})"


def read_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The fenced blocks of a Markdown text, in order, with the heading each sits under."""
    blocks: list[Block] = []
    lines = text.splitlines()
    heading = "top"
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        opened = _FENCE.match(line)
        if not opened:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"{page}:{index + 1}: the block is never closed")
        before = lines[index - 1].strip() if index else ""
        comment = _DIRECTIVE.match(before)
        blocks.append(
            Block(
                language=opened.group(1),
                code="\n".join(lines[index + 1 : end]) + "\n",
                heading=heading,
                line=index + 1,
                directive=comment.group(1) if comment else None,
                page=page,
            )
        )
        index = end + 1
    return blocks


def read_page(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file of this repository."""
    return read_blocks(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())


def slug(heading: str) -> str:
    """A heading as a test id."""
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


@dataclass(frozen=True)
class Example:
    """A python block and what to do with it."""

    block: Block
    source: str
    """The program to run: the block, after the blocks it continues."""
    skip_reason: str | None


def python_examples(blocks: list[Block]) -> list[Example]:
    """The python blocks, with their programs; a malformed directive raises AssertionError."""
    examples: list[Example] = []
    for block in (b for b in blocks if b.language == "python"):
        source = block.code
        reason = None
        directive = block.directive
        if directive is None:
            pass
        elif directive.startswith("not run"):
            reason = directive.removeprefix("not run").lstrip(":").strip()
            assert directive.startswith("not run:") and reason, (
                f"{block.where}: a block that is not run needs a reason: <!-- not run: why -->"
            )
        elif directive == "continues: previous":
            assert examples, f"{block.where}: continues a previous block, but there is none"
            previous = examples[-1]
            assert previous.skip_reason is None, (
                f"{block.where}: continues a block that is not run ({previous.skip_reason})"
            )
            source = previous.source + "\n" + block.code
        else:
            raise AssertionError(
                f"{block.where}: unknown directive <!-- {directive} -->; use "
                "<!-- not run: why --> or <!-- continues: previous -->"
            )
        examples.append(Example(block, source, reason))
    return examples


def services_named(source: str) -> list[str]:
    """The local services a program's URLs name."""
    schemes = re.findall(r"\b([a-z]+)://", source)
    return sorted({_URL_SERVICES[scheme] for scheme in schemes if scheme in _URL_SERVICES})


def with_service_urls(source: str, service_url: dict[str, str]) -> str:
    """The program, its local service URLs pointed where the tests find the services."""
    for name, url in _LOCAL_URLS.items():
        source = source.replace(url, service_url[name])
    return source


def expected_lines(code: str) -> list[str]:
    """What the block's ``print(...)  # -> text`` lines say it prints."""
    return [m.group(1) for m in map(_EXPECTED.match, code.splitlines()) if m]


def imports_of(code: str) -> str:
    """The block's import statements, as a program (top-level ``await`` allowed in the rest)."""
    tree = ast.parse(code)
    lines = code.splitlines()
    return "\n".join(
        "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
    )


def param(example: Example, number: int) -> object:
    """A pytest parameter for an example: its id, and a ``service`` mark per service it uses."""
    marks = [pytest.mark.service(name) for name in services_named(example.source)]
    ident = f"{number:02d}-{slug(example.block.heading)}"
    return pytest.param(example, id=ident, marks=marks)


def _python(source: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``source`` as a program file in ``cwd`` (a file: tracebacks and ``inspect`` see it)."""
    program = cwd / "_example.py"
    program.write_text(source, encoding="utf-8")
    return subprocess.run(
        [sys.executable, program.name],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **ENVIRONMENT},
        check=False,
    )


def run_example(example: Example, cwd: Path, service_url: dict[str, str]) -> None:
    """Run an example as a test: it exits 0 and prints what it says (or: skip, saying why)."""
    block = example.block
    if example.skip_reason is not None:
        # not run, but its imports must still exist
        checked = _python(imports_of(block.code), cwd)
        assert checked.returncode == 0, f"{block.where}: imports fail\n{checked.stderr}"
        pytest.skip(f"{block.page}:{block.line}: {example.skip_reason}")
    try:
        ast.parse(example.source)
    except SyntaxError as exc:
        pytest.fail(
            f"{block.where}: not a complete program ({exc.msg}, line {exc.lineno}); "
            "wrap top-level await in asyncio.run(main())"
        )
    try:
        ran = _python(with_service_urls(example.source, service_url), cwd)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{block.where} did not exit within {TIMEOUT:.0f} s "
            f"(a resource left open, such as an unclosed SQLiteMemory, keeps Python alive)\n"
            f"stdout: {exc.stdout!r}",
            pytrace=False,
        )
    assert ran.returncode == 0, f"{block.where} failed:\n{ran.stderr}"
    printed = [line.strip() for line in ran.stdout.splitlines()]
    missing = [line for line in expected_lines(block.code) if line not in printed]
    assert not missing, f"{block.where}: did not print {missing}; it printed:\n{ran.stdout}"


_GROUPS = {"broker", "mcp", "a2a"}
"""Commands whose first word is a group of subcommands."""


def _command_depth(words: list[str]) -> int:
    return 2 if words[0] in _GROUPS and len(words) > 1 else 1


def daimon_commands(blocks: list[Block]) -> list[str]:
    """The ``daimon <command>`` of every shell block's lines, each once."""
    commands: list[str] = []
    for block in blocks:
        if block.language not in SHELLS:
            continue
        for line in block.code.splitlines():
            found = _COMMAND.search(line.split("#", 1)[0])
            if found:
                words = found.group(1).split()
                command = " ".join(words[: _command_depth(words)])
                if command not in commands:
                    commands.append(command)
    return commands


DAIMON = Path(sys.executable).with_name("daimon")


def check_daimon_command(command: str) -> None:
    """``daimon <command> --help`` exits 0 and prints its usage."""
    ran = subprocess.run(
        [str(DAIMON), *command.split(), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert ran.returncode == 0, f"daimon {command} --help failed:\n{ran.stderr}"
    assert "Usage" in ran.stdout
