"""daimon against its peers and the plain-asyncio floor: framework overhead, in one run.

Usage (from the repository root, with daimon's own environment):

    benchmarks/peers/setup.sh                      # once: one virtualenv per peer
    .venv/bin/python benchmarks/peers/run.py [--rounds 3] [--only floor,daimon,agno]
        [--metrics run,stream] [--tool async|sync] [--import-samples 5]
        [--json results/peers.json] [--daimon-src OTHER/src]

``--daimon-src`` measures daimon from another source tree (``git worktree add --detach /tmp/x
<commit>``), for before/after figures beside the peers; a ``PYTHONPATH`` of the caller's is
ignored, since every cell starts from a clean environment.

Every (metric, framework) cell runs in a fresh interpreter of that framework's own virtualenv
(``benchmarks/.venvs/<name>``; floor and daimon use this interpreter). Within a round, each metric
runs every framework before the next metric starts, in an order that rotates each round, so load
on the machine spreads over all of them; the import metric takes ``--import-samples`` cells per
framework and round, interleaved the same way. The tables give medians over all samples; the
JSON file keeps every sample, the load average before and after each round, versions and the
machine.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
VENVS = BENCH / ".venvs"
sys.path.insert(0, str(HERE))

from common import OFFLINE_ENV  # noqa: E402

FRAMEWORKS = ("floor", "daimon", "agno", "pydantic_ai", "openai_agents", "langgraph", "smolagents")
LABELS = {
    "floor": "floor (plain asyncio)",
    "daimon": "daimon",
    "agno": "Agno",
    "pydantic_ai": "PydanticAI",
    "openai_agents": "OpenAI Agents SDK",
    "langgraph": "LangGraph",
    "smolagents": "smolagents",
}
VENV_NAMES = {
    "agno": "agno",
    "pydantic_ai": "pydantic-ai",
    "openai_agents": "openai-agents",
    "langgraph": "langgraph",
    "smolagents": "smolagents",
}
METRICS = (
    "import",
    "construct",
    "memory",
    "run",
    "new_run",
    "concurrent",
    "concurrent_per_run",
    "stream",
)
# (column, metric, key in the cell's result, format, lower is better)
COLUMNS = (
    ("import (ms)", "import", "import_ms", "{:,.0f}", True),
    ("construct (µs)", "construct", "construct_us", "{:,.2f}", True),
    ("memory/agent (KiB)", "memory", "tracemalloc_kib", "{:,.2f}", True),
    ("run (µs)", "run", "run_us", "{:,.1f}", True),
    ("new agent + run (µs)", "new_run", "new_run_us", "{:,.1f}", True),
    ("1,000 concurrent (s)", "concurrent", "wall_s", "{:,.3f}", True),
    ("peak RSS (MiB)", "concurrent", "peak_rss_mib", "{:,.0f}", True),
    ("1,000 concurrent, agent per run (s)", "concurrent_per_run", "wall_s", "{:,.3f}", True),
    ("stream (events/s)", "stream", "events_per_s", "{:,.0f}", False),
)


def python_for(name: str) -> Path | None:
    if name in ("floor", "daimon"):
        return Path(sys.executable)
    path = VENVS / VENV_NAMES[name] / "bin" / "python"
    return path if path.exists() else None


def imports_of(name: str) -> dict[str, str]:
    """The adapter's import statements (read from its source: importing it would load them)."""
    tree = ast.parse((HERE / "adapters" / f"{name}.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if target in ("IMPORTS", "IMPORTS_BARE"):
                found[target] = ast.literal_eval(node.value)
    return found


DAIMON_SRC = ""
"""Another ``src`` directory to measure daimon from (``--daimon-src``); empty: the installed one."""


def cell(name: str, metric: str, tool: str, statement: str = "") -> dict[str, Any]:
    python = python_for(name)
    assert python is not None
    args = [str(python), str(HERE / "cell.py"), metric, name]
    if statement:
        args.append(statement)
    env = {**os.environ, **OFFLINE_ENV, "BENCH_TOOL": tool, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    if name == "daimon" and DAIMON_SRC:
        env["PYTHONPATH"] = DAIMON_SRC
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=False, cwd=HERE)
    at = out.stdout.rfind("RESULT {")  # a framework's own output may precede it on its line
    if out.returncode != 0 or at < 0:
        raise SystemExit(f"{metric}/{name} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout[at + len("RESULT ") :].splitlines()[0])  # type: ignore[no-any-return]


def prepare(names: list[str]) -> None:
    """Byte-compile daimon and import every framework once, untimed, before the first round.

    pip byte-compiles what it installs, so the peers' modules load from ``.pyc`` files; daimon is
    installed editable (and this machine sets ``PYTHONDONTWRITEBYTECODE``), so without this step
    its import cells would compile its sources every time. The untimed import also brings every
    framework's files into the page cache, so the first round's first framework is not the only
    one to read from disk.
    """
    if "daimon" in names:
        code = (
            "import compileall, os, daimon; "
            "raise SystemExit(not compileall.compile_dir(os.path.dirname(daimon.__file__), "
            "quiet=1))"
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.pop("PYTHONPATH", None)
        if DAIMON_SRC:
            env["PYTHONPATH"] = DAIMON_SRC
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
    for name in names:
        cell(name, "import", "async", imports_of(name)["IMPORTS"])


def version_of(name: str) -> str:
    python = python_for(name)
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); "
        f"import adapters.{name} as a; print(a.version())"
    )
    env = {**os.environ, **OFFLINE_ENV}
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 else "?"


def median_of(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if key in s]
    return statistics.median(values) if values else None


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = int(Path("/proc/meminfo").read_text().split()[1]) / 1024 / 1024
    except OSError:
        mem = 0.0
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {mem:.1f} GiB, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )


def table(medians: dict[str, dict[str, dict[str, float | None]]], names: list[str]) -> str:
    lines = ["| framework | " + " | ".join(c[0] for c in COLUMNS) + " |"]
    lines.append("|---|" + "---:|" * len(COLUMNS))
    for name in names:
        cells = []
        for _, metric, key, fmt, _ in COLUMNS:
            value = medians[name].get(metric, {}).get(key)
            cells.append("—" if value is None else fmt.format(value))
        lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios(medians: dict[str, dict[str, dict[str, float | None]]], names: list[str]) -> str:
    """daimon against the best peer and the floor: how many times better (>1) or worse (<1)."""
    peers = [n for n in names if n not in ("floor", "daimon")]
    lines = [
        "| metric | daimon | best peer | daimon vs best peer | floor | daimon vs floor |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for column, metric, key, fmt, lower in COLUMNS:
        d = medians.get("daimon", {}).get(metric, {}).get(key)
        if d is None:
            continue
        scored = [(v, n) for n in peers if (v := medians[n].get(metric, {}).get(key)) is not None]
        best = (min(scored) if lower else max(scored)) if scored else None
        floor = medians.get("floor", {}).get(metric, {}).get(key)
        vs_best = "—"
        if best is not None and d:
            factor = best[0] / d if lower else d / best[0]
            vs_best = f"{factor:,.1f}× {'better' if factor >= 1 else 'worse'}"  # noqa: RUF001
        vs_floor = "—"
        if floor:
            vs_floor = f"{(d / floor if lower else floor / d):,.1f}× the floor"  # noqa: RUF001
        best_text = f"{fmt.format(best[0])} ({LABELS[best[1]]})" if best else "—"
        floor_text = fmt.format(floor) if floor is not None else "—"
        lines.append(
            f"| {column} | {fmt.format(d)} | {best_text} | {vs_best} | {floor_text} | {vs_floor} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="comma-separated frameworks (default: all installed)")
    parser.add_argument("--metrics", help=f"comma-separated, from {','.join(METRICS)}")
    parser.add_argument("--tool", choices=("async", "sync"), default="async")
    parser.add_argument(
        "--import-samples", type=int, default=5, help="import cells per framework and round"
    )
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/peers-<time>.json")
    parser.add_argument("--daimon-src", help="measure daimon from this src directory")
    args = parser.parse_args()
    global DAIMON_SRC
    DAIMON_SRC = os.path.abspath(args.daimon_src) if args.daimon_src else ""
    wanted = args.only.split(",") if args.only else list(FRAMEWORKS)
    names = [n for n in FRAMEWORKS if n in wanted and python_for(n) is not None]
    missing = [n for n in wanted if n not in names]
    if missing:
        print(f"skipped (no virtualenv; run benchmarks/peers/setup.sh): {missing}", file=sys.stderr)
    metrics = args.metrics.split(",") if args.metrics else list(METRICS)
    prepare(names)
    versions = {n: version_of(n) for n in names}
    statements = {n: imports_of(n) for n in names}
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {n: {m: [] for m in metrics} for n in names}
    loads: list[dict[str, Any]] = []
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()
    for round_no in range(args.rounds):
        load_before = os.getloadavg()
        shift = round_no % len(names)
        order = names[shift:] + names[:shift]
        for metric in metrics:
            # An import cell is one short sample, the noisiest on a loaded machine: take several
            # per round, still one fresh interpreter each and interleaved across frameworks.
            for _ in range(args.import_samples if metric == "import" else 1):
                for name in order:
                    if metric == "import":
                        result = cell(name, metric, args.tool, statements[name]["IMPORTS"])
                        if "IMPORTS_BARE" in statements[name]:
                            bare = cell(name, metric, args.tool, statements[name]["IMPORTS_BARE"])
                            result["import_bare_ms"] = bare["import_ms"]
                    else:
                        result = cell(name, metric, args.tool)
                    raw[name][metric].append(result)
        loads.append({"round": round_no, "before": load_before, "after": os.getloadavg()})
        print(
            f"round {round_no + 1}/{args.rounds} done ({time.perf_counter() - t0:.0f} s, "
            f"load {loads[-1]['after'][0]:.2f})",
            file=sys.stderr,
        )
    medians = {
        n: {
            m: {k: median_of(raw[n][m], k) for k in (raw[n][m][0] if raw[n][m] else {})}
            for m in metrics
        }
        for n in names
    }
    record = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - t0),
        "machine": machine(),
        "tool": args.tool,
        "rounds": args.rounds,
        "import_samples": args.import_samples,
        "load": loads,
        "versions": versions,
        "medians": medians,
        "raw": raw,
    }
    out = args.json or BENCH / "results" / f"peers-{started:%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))
    avg = [round(sum(x["before"][0] + x["after"][0] for x in loads) / (2 * len(loads)), 2)]
    print(f"## Results ({started:%Y-%m-%d %H:%M} UTC, {args.rounds} rounds, tool={args.tool})\n")
    per_round = ", ".join(f"{x['before'][0]:.2f} → {x['after'][0]:.2f}" for x in loads)
    print(f"Machine: {machine()}. Load average (1 min) during the run: ~{avg[0]}.\n")
    print(f"Load average (1 min) before → after each round: {per_round}.\n")
    print("Versions: " + ", ".join(f"{LABELS[n]} {v}" for n, v in versions.items()) + "\n")
    print(table(medians, names))
    if "daimon" in names and "import" in metrics:
        bare = medians["daimon"]["import"].get("import_bare_ms")
        if bare is not None:
            print(
                f"\ndaimon `import daimon` alone: {bare:,.0f} ms "
                "(the table: `from daimon import Agent, tool`)."
            )
    if "daimon" in names:
        print("\n" + ratios(medians, names))
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
