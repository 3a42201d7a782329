"""What importing daimon loads, checked in fresh interpreters.

A deny-list cannot prove "standard library only", and import-linter cannot see an eager package
``__init__``; these checks can.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .boundary import EAGER_DEPENDENCIES, LAZY_DEPENDENCIES, OPTIONAL_LIBRARIES

_REPORT = """
import json, sys, time
start = time.perf_counter()
{statement}
elapsed = time.perf_counter() - start
print(json.dumps({{"modules": sorted(sys.modules), "seconds": elapsed}}))
"""


def _run(statement: str) -> tuple[set[str], float]:
    # -P: do not put the working directory on sys.path, so only the installed daimon is found.
    result = subprocess.run(
        [sys.executable, "-P", "-c", _REPORT.format(statement=statement)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"{statement!r} failed:\n{result.stderr}"
    report = json.loads(result.stdout.splitlines()[-1])
    return set(report["modules"]), float(report["seconds"])


def _new_modules(statement: str) -> set[str]:
    baseline, _ = _run("pass")  # what the interpreter loads anyway (site, .pth hooks, ...)
    loaded, _ = _run(statement)
    return loaded - baseline


def _top_level(modules: set[str]) -> set[str]:
    return {name.partition(".")[0] for name in modules}


def test_core_loads_only_the_standard_library() -> None:
    outside = _top_level(_new_modules("import daimon.core")) - {"daimon"}
    assert outside <= set(sys.stdlib_module_names), sorted(outside - set(sys.stdlib_module_names))


def test_core_loads_nothing_else_of_daimon() -> None:
    # Importing daimon.core runs daimon/__init__.py first: a plugin that needs only core must not
    # pay for (or depend on) the agent, tools, ... So the root package must load lazily.
    daimon_modules = {m for m in _new_modules("import daimon.core") if m.startswith("daimon.")}
    others = {m for m in daimon_modules if not m.startswith("daimon.core")}
    assert not others, f"import daimon.core also loaded: {sorted(others)}"


def _kit_modules() -> list[str]:
    spec = importlib.util.find_spec("daimon.kit")
    assert spec is not None and spec.origin is not None
    folder = Path(spec.origin).parent
    return sorted(
        f"daimon.kit.{path.stem}" for path in folder.glob("*.py") if path.stem != "__init__"
    )


def test_kit_loads_only_core_and_the_standard_library() -> None:
    # A plugin imports the kit beside core: the whole kit must cost no more than core does.
    modules = _kit_modules()
    assert "daimon.kit.task_records" in modules
    new = _new_modules(f"import {', '.join(modules)}")
    outside = _top_level(new) - {"daimon"}
    assert outside <= set(sys.stdlib_module_names), sorted(outside - set(sys.stdlib_module_names))
    others = {m for m in new if m.startswith("daimon.")}
    others -= {m for m in others if m.startswith(("daimon.core", "daimon.kit"))}
    assert not others, f"importing the kit also loaded: {sorted(others)}"


def test_import_daimon_loads_no_optional_library() -> None:
    loaded = _top_level(_new_modules("import daimon"))
    forbidden = loaded & (OPTIONAL_LIBRARIES | LAZY_DEPENDENCIES)
    assert not forbidden, f"import daimon loaded {sorted(forbidden)}"


def test_import_daimon_loads_only_declared_dependencies() -> None:
    loaded = _top_level(_new_modules("import daimon"))
    allowed = set(sys.stdlib_module_names) | EAGER_DEPENDENCIES | {"daimon"}
    assert loaded <= allowed, f"undeclared or optional libraries loaded: {sorted(loaded - allowed)}"


@pytest.mark.parametrize("statement", ["import daimon.core", "import daimon"])
def test_report_import_time(statement: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Reported, not asserted: timings on shared CI machines are too noisy to fail a build on.
    best = min(_run(statement)[1] for _ in range(5))
    with capsys.disabled():
        print(f"\n{statement}: {best * 1000:.1f} ms (best of 5, fresh interpreter)")
