"""The MCP examples run as a user would run them: the client example starts the server example."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_the_mcp_client_example_uses_the_mcp_server_example() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_client.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "tools: calc_add, calc_divide, calc_ask_calculator",
        "add(1, 2) = 3",
        "The remote agent says: The sum is 42.0.",
    ]
