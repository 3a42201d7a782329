"""daimon.orchestration imports only the standard library and daimon.core."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import daimon.orchestration

PACKAGE = Path(daimon.orchestration.__file__).parent


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: use absolute imports"
            modules.add(node.module or "")
    return modules


def allowed(module: str) -> bool:
    top = module.partition(".")[0]
    if top == "daimon":
        return module.startswith(("daimon.core", "daimon.orchestration"))
    return top in sys.stdlib_module_names or top == "__future__"


def test_only_the_standard_library_and_core_are_imported() -> None:
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) > 5
    offending = {
        path.name: sorted(m for m in imported_modules(path) if not allowed(m)) for path in files
    }
    assert {name: mods for name, mods in offending.items() if mods} == {}


def test_the_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from daimon.agent import Agent\nimport numpy\nimport asyncio\n")
    assert sorted(m for m in imported_modules(bad) if not allowed(m)) == ["daimon.agent", "numpy"]


def test_every_public_name_is_documented() -> None:
    checked = 0
    for name in daimon.orchestration.__all__:
        value = getattr(daimon.orchestration, name)
        if inspect.isclass(value) or inspect.isfunction(value):  # not constants or type aliases
            assert inspect.getdoc(value), f"{name} has no docstring"
            checked += 1
    assert checked > 20
