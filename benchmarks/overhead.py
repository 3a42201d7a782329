"""daimon against the plain-asyncio floor only: the quick check while working on the loop.

Usage: python benchmarks/overhead.py [--rounds N] [--metrics run,stream] [--json out.json]

The same cells as ``benchmarks/peers/run.py`` (which also measures the peer frameworks), limited
to the floor and daimon, so it needs no peer virtualenvs.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "--only", "floor,daimon", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).parent / "peers" / "run.py"), run_name="__main__")
