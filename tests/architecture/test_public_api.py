"""Every ``__all__`` in daimon is honest: a sorted tuple of names that exist, without duplicates."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

import daimon
from daimon.core import MissingDependencyError

from .boundary import OPTIONAL_LIBRARIES


def _module_names() -> list[str]:
    """Every module of the daimon package, found on disk (namespace subpackages included)."""
    names = {"daimon"}
    for root in map(Path, daimon.__path__):
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if "__pycache__" in parts:
                continue
            names.add(".".join(("daimon", *parts)))
    return sorted(names)


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except MissingDependencyError as exc:
        pytest.skip(f"{name} needs an extra: {exc}")
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in OPTIONAL_LIBRARIES:
            pytest.skip(f"{name} needs {exc.name}, which an extra installs")
        raise


MODULES = _module_names()


@pytest.mark.parametrize("name", MODULES)
def test_all_is_a_sorted_tuple_of_existing_names(name: str) -> None:
    module = _import(name)
    exported = getattr(module, "__all__", None)
    if exported is None:
        assert name not in ("daimon", "daimon.core"), f"{name} must define __all__"
        pytest.skip(f"{name} defines no __all__")
    assert isinstance(exported, tuple), f"{name}.__all__ must be a tuple"
    assert all(isinstance(item, str) for item in exported)
    duplicates = sorted({item for item in exported if exported.count(item) > 1})
    assert not duplicates, f"{name}.__all__ repeats {duplicates}"
    assert list(exported) == sorted(exported), (
        f"{name}.__all__ is not sorted (case-sensitively); expected {sorted(exported)}"
    )
    missing = [item for item in exported if not hasattr(module, item)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


def test_the_root_core_and_kit_are_covered() -> None:
    assert {
        "daimon",
        "daimon.core",
        "daimon.core.codec",
        "daimon.kit",
        "daimon.kit.vectors",
    } <= set(MODULES)


def test_core_holds_the_contract_only() -> None:
    # The backend kit's modules live in daimon.kit; core keeps types, protocols, errors and codec.
    core = {name.rsplit(".", 1)[1] for name in MODULES if name.startswith("daimon.core.")}
    kit = {name.rsplit(".", 1)[1] for name in MODULES if name.startswith("daimon.kit.")}
    assert not core & kit, f"in both daimon.core and daimon.kit: {sorted(core & kit)}"
    assert {"task_records", "sdk_support", "vectors", "checkpoint_records", "lifecycle"} <= kit


def test_core_re_exports_every_public_core_type() -> None:
    import daimon.core

    for name in MODULES:
        # codec and optional are used as modules; lazy builds core's own lazy exports.
        if not name.startswith("daimon.core.") or name.rsplit(".", 1)[1] in (
            "codec",
            "optional",
            "lazy",
        ):
            continue
        module = importlib.import_module(name)
        missing = set(getattr(module, "__all__", ())) - set(daimon.core.__all__)
        assert not missing, f"daimon.core does not re-export {sorted(missing)} from {name}"
