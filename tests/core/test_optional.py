"""require(): import an extra's library or name the extra."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import pathlib
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

import pytest

from daimon.core import MissingDependencyError
from daimon.core.optional import require


def test_returns_the_module() -> None:
    assert require("json", extra="never-needed") is json


def test_missing_module_names_the_extra() -> None:
    with pytest.raises(MissingDependencyError) as caught:
        require("daimon_no_such_module_xyz", extra="redis")
    error = caught.value
    assert 'pip install "daimon-agents[redis]"' in str(error)
    assert (error.module, error.extra) == ("daimon_no_such_module_xyz", "redis")
    assert isinstance(error.__cause__, ModuleNotFoundError)
    assert error.__cause__.name == "daimon_no_such_module_xyz"
    assert isinstance(error, ImportError)  # ``except ImportError`` still works


class _Blocker(importlib.abc.MetaPathFinder):
    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def blocked_csv(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [n for n in sys.modules if n == "csv" or n.startswith("csv.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Blocker("csv"), *sys.meta_path])
    yield


@pytest.mark.usefixtures("blocked_csv")
def test_installed_but_blocked_module() -> None:
    with pytest.raises(
        MissingDependencyError, match=r'pip install "daimon-agents\[csvx\]"'
    ) as caught:
        require("csv", extra="csvx")
    assert isinstance(caught.value.__cause__, ImportError)


def test_a_broken_library_is_reported_too(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A library that is installed but fails to import with ImportError is reported the same way,
    # keeping the original error as the cause.
    (tmp_path / "daimon_broken_lib.py").write_text("import daimon_missing_dependency_of_it\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingDependencyError) as caught:
        require("daimon_broken_lib", extra="broken")
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    assert caught.value.__cause__.name == "daimon_missing_dependency_of_it"
    assert "daimon_broken_lib" not in sys.modules
