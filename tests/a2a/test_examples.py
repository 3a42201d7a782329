"""The A2A examples run as a user would run them: the client example starts the server example."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_the_a2a_client_example_talks_to_the_a2a_server_example() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "a2a_client.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "streamed: A2A WORKS !",
        "The shouter said: HI !",
    ]
