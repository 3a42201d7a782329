"""The local model's answers that the pages show are the answers it gives.

Every ``$ ./scripts/demo ...`` transcript in a ```console block of the README or of a page under
docs/ is run: ``./scripts/demo`` in a copy of this clone (its first run creates ``.venv`` there
with what the demo installs, as from a fresh clone), then each transcript's command, and the
output must be the transcript's lines. Only the run time at the end of the summary line is free
(``· 3.8 s``), and what a shown line leaves out with ``…`` (a small model's wording after its
first words depends on the CPU's arithmetic: the page says so where it uses it); ``==>`` lines
(what the first run installs) are checked against that first run. pip fetches from PyPI or its
local cache: without them this fails.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from .markdown import ROOT, read_page

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DEMO = "./scripts/demo"
_SECONDS = re.compile(r" · [0-9.]+ s$")
_UNCOPIED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", ".*_cache", "site", "*.egg-info", "build", "dist"
)


@dataclass(frozen=True)
class Transcript:
    """One command of a console block and the lines shown after it."""

    where: str
    arguments: list[str]
    lines: list[str]


def transcripts() -> list[Transcript]:
    """The ``$ ./scripts/demo`` commands of every page's console blocks, with their output."""
    found: list[Transcript] = []
    for page in PAGES:
        for block in read_page(page):
            if block.language != "console":
                continue
            for command, lines in _commands(block.code):
                words = shlex.split(command)
                if words and words[0] == DEMO:
                    found.append(Transcript(f"{block.page}:{block.line}", words[1:], lines))
    return found


def _commands(code: str) -> list[tuple[str, list[str]]]:
    """Each ``$ command`` of a console block with the lines it printed."""
    commands: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
    return commands


def _environment() -> dict[str, str]:
    """This environment less what would pick another model or point at this tree's venv."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "DAIMON_MODEL") and not key.endswith("_KEY")
    }
    env["PYTHONUNBUFFERED"] = "1"  # notes (stderr) and answer (stdout) in the order written
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _demo(clone: Path, arguments: list[str], timeout: float) -> list[str]:
    ran = subprocess.run(
        [DEMO, *arguments],
        cwd=clone,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert ran.returncode == 0, (
        f"{DEMO} {shlex.join(arguments)} exited {ran.returncode}:\n{ran.stdout}"
    )
    return ran.stdout.splitlines()


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A copy of this clone where ``./scripts/demo`` ran once, and what that first run printed."""
    clone = tmp_path_factory.mktemp("clone") / "daimon"
    shutil.copytree(ROOT, clone, ignore=_UNCOPIED)
    return clone, _demo(clone, [], timeout=540)


TRANSCRIPTS = transcripts()


def test_the_pages_show_the_demo() -> None:
    where = {t.where.split(":")[0] for t in TRANSCRIPTS}
    assert {"README.md", "docs/guides/cli.md"} <= where, where
    assert any(not t.arguments for t in TRANSCRIPTS), "the demo's own question is shown"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=[t.where for t in TRANSCRIPTS])
def test_the_demo_answers_as_shown(
    transcript: Transcript, first_run: tuple[Path, list[str]]
) -> None:
    clone, installed = first_run
    steps = [line for line in transcript.lines if line.startswith("==> ")]
    assert steps == [line for line in installed if line.startswith("==> ")][: len(steps)], (
        f"{transcript.where}: the first run printed other steps:\n" + "\n".join(installed)
    )
    shown = [_SECONDS.sub(" · s", line) for line in transcript.lines if line not in steps]
    printed = [_SECONDS.sub(" · s", line) for line in _demo(clone, transcript.arguments, 300)]
    matched = len(printed) == len(shown) and all(map(_shows, shown, printed))
    assert matched, f"{transcript.where}: the demo printed\n" + "\n".join(printed)


def _shows(shown: str, printed: str) -> bool:
    """Whether ``printed`` is the line ``shown``, any text standing where it has ``…``."""
    pattern = ".+".join(re.escape(part) for part in shown.split("…"))
    return re.fullmatch(pattern, printed) is not None


def test_an_elision_stands_for_some_text_only() -> None:
    assert _shows("Hello! I'm here to help with any …", "Hello! I'm here to help with any task.")
    assert _shows("32 in / … out tokens · s", "32 in / 21 out tokens · s")
    assert not _shows("32 in / … out tokens · s", "33 in / 21 out tokens · s")
    assert not _shows("Hello! …", "Hello!")  # it stands for something
    assert not _shows("exact", "exactly")
