from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import daimon.memory
from daimon.memory import SlidingWindowMemory

MEMORY_DIR = Path(daimon.memory.__file__).parent


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert list(daimon.memory.__all__) == sorted(daimon.memory.__all__)
    for name in daimon.memory.__all__:
        assert getattr(daimon.memory, name) is not None


def test_lazy_names_load_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        daimon.memory._LAZY, "LaterMemory", ("daimon.memory.window", "SlidingWindowMemory")
    )
    try:
        assert "LaterMemory" not in vars(daimon.memory)
        assert daimon.memory.LaterMemory is SlidingWindowMemory
        assert vars(daimon.memory)["LaterMemory"] is SlidingWindowMemory  # cached
    finally:
        vars(daimon.memory).pop("LaterMemory", None)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchMemory"):
        _ = daimon.memory.NoSuchMemory


def test_a_backend_missing_its_library_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A backend module that exists but cannot import its library must not look like a typo.
    (tmp_path / "daimon_test_backend.py").write_text("import no_such_library_for_daimon_tests\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(daimon.memory._LAZY, "NeedsLib", ("daimon_test_backend", "NeedsLib"))
    with pytest.raises(ModuleNotFoundError, match="no_such_library_for_daimon_tests"):
        _ = daimon.memory.NeedsLib
    assert "NeedsLib" not in vars(daimon.memory)


def test_dir_lists_the_public_names() -> None:
    assert set(daimon.memory.__all__) <= set(dir(daimon.memory))


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


@pytest.mark.parametrize("path", sorted(MEMORY_DIR.glob("*.py")), ids=lambda p: p.name)
def test_memory_modules_import_only_stdlib_core_and_kit(path: Path) -> None:
    for module in _imports(path):
        top = module.partition(".")[0]
        allowed = (
            top in sys.stdlib_module_names
            or module in ("daimon.core", "daimon.kit")
            or module.startswith(("daimon.core.", "daimon.kit.", "daimon.memory."))
        )
        assert allowed, f"{path.name} imports {module}"
