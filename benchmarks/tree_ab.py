"""daimon's ``run`` cell on two source trees, interleaved: this tree against an earlier one.

Usage (from the repository root):

    git archive <commit> src | tar -x -C /tmp/before        # the earlier tree's sources
    .venv/bin/python benchmarks/tree_ab.py --before /tmp/before/src [--rounds 7]
        [--tools sync,async] [--metric run|new_run|construct|stream] [--after OTHER/src]

Each round runs the cell of ``benchmarks/peers/cell.py`` (``run``: µs per ReAct run, median of up
to 3,000 runs) for the floor, then for daimon from each tree with each tool kind, in an order
rotated each round, every cell in a fresh interpreter (each tree is put first on ``PYTHONPATH``:
``--after`` defaults to this checkout's ``src``, so a git worktree measures its own sources, not
the installed ones). ``--metric`` picks another cell of ``cell.py``. Prints the median over
rounds, every round's figure, and the 1-minute load average before each round and after the last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PEERS = Path(__file__).resolve().parent / "peers"
HERE_SRC = Path(__file__).resolve().parent.parent / "src"
KEYS = {"run": "run_us", "new_run": "new_run_us", "construct": "construct_us"}
"""Each metric's key in the cell's result (``stream`` is measured as events per second)."""


def cell(adapter: str, tool: str, source: str | None, metric: str = "run") -> float:
    """µs per run, from one fresh interpreter; ``source`` is a ``src`` directory to import from."""
    env = {**os.environ, "BENCH_TOOL": tool, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    if source is not None:
        env["PYTHONPATH"] = source
    done = subprocess.run(
        [sys.executable, "cell.py", metric, adapter],
        cwd=PEERS,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"{adapter} ({tool}, {source or 'this tree'}) failed:\n{done.stderr[-3000:]}"
        )
    line = done.stdout[done.stdout.rfind("RESULT ") + len("RESULT ") :].splitlines()[0]
    result = json.loads(line)
    if metric == "stream":
        return 1e6 / float(result["events_per_s"])  # µs per event: lower is better, as the rest
    return float(result[KEYS[metric]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier tree's src directory")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tools", default="sync,async")
    parser.add_argument("--after", default=str(HERE_SRC), help="the later tree's src directory")
    parser.add_argument("--metric", default="run", choices=(*KEYS, "stream"))
    args = parser.parse_args()
    tools = args.tools.split(",")
    cells = [("floor", tools[0], "floor")] + [
        (tree, tool, "daimon") for tool in tools for tree in ("before", "after")
    ]
    results: dict[tuple[str, str], list[float]] = {(tree, tool): [] for tree, tool, _ in cells}
    loads = []
    for round_ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        shift = round_ % len(cells)
        for tree, tool, adapter in cells[shift:] + cells[:shift]:
            source = args.before if tree == "before" else args.after
            results[(tree, tool)].append(cell(adapter, tool, source, args.metric))
    loads.append(os.getloadavg()[0])
    for (tree, tool), samples in results.items():
        rounds = ", ".join(f"{s:.2f}" for s in samples)
        unit = "µs per event" if args.metric == "stream" else f"µs ({args.metric})"
        print(f"{tree:6s} {tool:5s} {statistics.median(samples):8.2f} {unit}  ({rounds})")
    for tree in ("before", "after"):
        if len(tools) == 2:
            first, second = (statistics.median(results[(tree, t)]) for t in tools)
            print(f"{tree}: {tools[0]} / {tools[1]} = {first / second:.2f}x")
    print("load average (1 min), before each round and after the last:", loads)


if __name__ == "__main__":
    main()
