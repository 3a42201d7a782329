"""Small functions with one job: none under ``src/`` longer than 80 lines, complexity under 15.

ruff's ``C90`` rule (``pyproject.toml``) keeps each function's cyclomatic complexity at 15 or
less; this test keeps each function's length (``def`` line to last line, docstring included) at
80 lines or less, and checks that the ruff rule stays switched on.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
MAX_LINES = 80
MAX_COMPLEXITY = 15


def long_functions(source: str, max_lines: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """``(qualified name, first line, length)`` of each function longer than ``max_lines``."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}."
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                length = child.end_lineno - child.lineno + 1
                if length > max_lines:
                    found.append((name[:-1], child.lineno, length))
            visit(child, name)

    visit(ast.parse(source), "")
    return found


def test_no_function_under_src_is_longer_than_80_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
        for path in sorted(SRC.rglob("*.py"))
        for name, line, length in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert not too_long, f"split these into functions of at most {MAX_LINES} lines: {too_long}"


def test_the_check_finds_a_long_function_nested_or_not() -> None:
    def lines(indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(80))

    source = (
        "def short():\n    return 1\n"
        f"def long():\n{lines('    ')}"
        f"class C:\n    def method(self):\n        def inner():\n{lines(' ' * 12)}"
    )
    found = long_functions(source)
    assert [(name, length) for name, _, length in found] == [
        ("long", 81),
        ("C.method", 82),
        ("C.method.inner", 81),
    ]


def test_ruff_checks_complexity_under_src() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        lint = tomllib.load(f)["tool"]["ruff"]["lint"]
    assert "C90" in lint["select"]
    assert lint["mccabe"]["max-complexity"] <= MAX_COMPLEXITY
