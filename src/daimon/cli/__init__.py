"""The ``daimon`` command (extra ``cli``): run, chat, mcp serve, a2a serve and eval.

``main`` is the console script's entry point; it returns the exit code (see
:mod:`daimon.cli.app`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ("main",)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``daimon`` command with ``argv`` (default: the process's arguments)."""
    from daimon.core.errors import MissingDependencyError
    from daimon.core.optional import require

    try:
        require("typer", extra="cli")
        require("rich", extra="cli")
    except MissingDependencyError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    import daimon.cli.serving  # registers `mcp`, `a2a` and `eval` on the app
    import daimon.cli.temporal  # noqa: F401 - registers `temporal worker` on the app
    from daimon.cli.app import main as run_app

    return run_app(argv)
