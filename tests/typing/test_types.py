"""A type checker infers Agent[Deps, Out], AgentResponse[Out] and RunContext[Deps] as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_documented_types_are_inferred() -> None:
    checked = mypy(HERE / "agent_types.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_promptable_conforms_to_the_protocol() -> None:
    checked = mypy(HERE / "promptable_types.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_look_alike_with_a_wrong_signature_is_caught(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_promptable.py"
    wrong.write_text(
        "from daimon.core import AgentResponse, Promptable\n\n"
        "class NoKeywords:\n"
        "    name = 'x'\n"
        "    async def prompt(self, input: str) -> AgentResponse:\n"
        "        return AgentResponse(text=input)\n"
        "    def prompt_stream(self, input: str) -> None: ...\n\n"
        "p: Promptable = NoKeywords()\n"
    )
    checked = mypy(wrong)
    assert checked.returncode == 1
    assert 'has type "NoKeywords", variable has type "Promptable"' in checked.stdout


def test_a_wrong_expectation_is_caught(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "from dataclasses import dataclass\n"
        "from typing import assert_type\n"
        "from daimon import Agent, AgentResponse\n"
        "from daimon.models import ScriptedModel\n\n"
        "@dataclass\nclass City:\n    name: str\n\n"
        "async def check() -> None:\n"
        "    answer = await Agent(ScriptedModel([]), output_type=City).prompt('x')\n"
        "    assert_type(answer, AgentResponse[str])\n"
        "    Agent(ScriptedModel([]), deps_type=int).prompt_sync('x', deps='not an int')\n"
    )
    checked = mypy(wrong)
    assert checked.returncode == 1
    assert 'Expression is of type "AgentResponse[City]", not "AgentResponse[str]"' in checked.stdout
    assert 'Argument "deps" to "prompt_sync" of "Agent" has incompatible type "str"' in (
        checked.stdout
    )
