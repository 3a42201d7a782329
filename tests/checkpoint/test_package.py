from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import daimon.checkpoint
from daimon.checkpoint.file import FileCheckpoint
from daimon.core import Checkpoint
from daimon.testing.checkpoint import CheckpointStore

CHECKPOINT_DIR = Path(daimon.checkpoint.__file__).parent
CLIENT_LIBRARY: dict[str, set[str]] = {
    "redis.py": {"redis"},
    "nats.py": {"nats"},
    "postgres.py": {"psycopg", "psycopg_pool"},
}


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert list(daimon.checkpoint.__all__) == sorted(daimon.checkpoint.__all__)
    assert set(daimon.checkpoint.__all__) == set(daimon.checkpoint._LAZY)
    for name in daimon.checkpoint.__all__:
        assert getattr(daimon.checkpoint, name).__name__ == name
    with pytest.raises(AttributeError, match="NoSuchCheckpoint"):
        _ = daimon.checkpoint.NoSuchCheckpoint  # type: ignore[attr-defined]


def test_importing_the_package_loads_no_client_library() -> None:
    code = (
        "import sys, daimon.checkpoint, daimon.checkpoint.file;"
        "print(sorted(m for m in ('redis', 'nats', 'aiosqlite', 'psycopg') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_backends_satisfy_the_protocols(tmp_path: Path) -> None:
    store = FileCheckpoint(tmp_path)
    checkpoint: Checkpoint = store
    extended: CheckpointStore = store
    assert checkpoint is extended


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def _required(path: Path) -> set[str]:
    """Top-level names of the libraries a module loads through ``require``."""
    return {
        node.args[0].value.partition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "require"
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.parametrize("path", sorted(CHECKPOINT_DIR.glob("*.py")), ids=lambda p: p.name)
def test_plugins_import_only_stdlib_core_kit_and_their_own_client(path: Path) -> None:
    for module in _imports(path):
        allowed = (
            module.partition(".")[0] in sys.stdlib_module_names
            or module in ("daimon.core", "daimon.kit")
            or module.startswith(("daimon.core.", "daimon.kit."))
            or (module == "daimon.checkpoint" and path.name != "__init__.py")  # for _base
            or (path.name == "__init__.py" and module.startswith("daimon.checkpoint."))
        )
        assert allowed, f"{path.name} imports {module}"
    assert _required(path) == CLIENT_LIBRARY.get(path.name, set())


@pytest.mark.parametrize(
    ("module", "library", "extra"),
    [
        ("daimon.checkpoint.redis", "redis", "redis"),
        ("daimon.checkpoint.nats", "nats", "nats"),
        ("daimon.checkpoint.postgres", "psycopg", "postgres"),
    ],
)
def test_a_missing_client_library_names_its_extra(
    module: str,
    library: str,
    extra: str,
    import_without: Callable[[str, str], tuple[str, str, str]],
) -> None:
    named, missing, message = import_without(module, library)
    assert (named, missing.partition(".")[0]) == (extra, library)  # e.g. redis.asyncio
    assert f'pip install "daimon-agents[{extra}]"' in message
