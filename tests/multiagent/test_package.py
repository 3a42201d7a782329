"""daimon.multiagent imports only the standard library and the layers under it.

Those are daimon.core, daimon.cost (budgets and spend records), daimon.agent and daimon.tools.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import daimon.multiagent

PACKAGE = Path(daimon.multiagent.__file__).parent
ALLOWED = ("daimon.core", "daimon.cost", "daimon.agent", "daimon.tools", "daimon.multiagent")


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
        return any(module == a or module.startswith(a + ".") for a in ALLOWED)
    return top in sys.stdlib_module_names or top == "__future__"


def test_only_the_standard_library_and_the_layers_under_it_are_imported() -> None:
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 5
    offending = {
        path.name: sorted(m for m in imported_modules(path) if not allowed(m)) for path in files
    }
    assert {name: mods for name, mods in offending.items() if mods} == {}


def test_the_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from daimon.server import serve\nimport pydantic\nimport asyncio\n")
    found = sorted(m for m in imported_modules(bad) if not allowed(m))
    assert found == ["daimon.server", "pydantic"]


def test_every_public_name_is_documented() -> None:
    checked = 0
    for name in daimon.multiagent.__all__:
        value = getattr(daimon.multiagent, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{name} has no docstring"
            checked += 1
    assert checked >= 8


def test_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert max(sizes.values()) < 500, sizes
