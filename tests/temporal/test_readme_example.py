"""The README's Temporal example runs, against the dev server (test_readme.py cannot start one)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from ._server import DevServer

README = Path(__file__).parents[2] / "README.md"
SRC = Path(__file__).parents[2] / "src"


def _example() -> str:
    section = README.read_text().split("## Durable runs on Temporal", 1)[1]
    match = re.search(r"```python\n(.*?)\n```", section, re.DOTALL)
    assert match, "the README's Temporal section has no python block"
    return match.group(1)


def test_the_readme_example_starts_a_run_and_approves_it_by_id(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    program = tmp_path / "example.py"
    program.write_text(_example())
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": temporal_server.address,
        "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    done = subprocess.run(
        [sys.executable, str(program)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["refund {'order': '42'}", "Done: order 42 refunded"]
