"""Fixtures for the architecture tests."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

import pytest


class ImportBlocker(importlib.abc.MetaPathFinder):
    """Makes the named top-level packages look uninstalled, as in an install without the extra."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def block_imports(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``block_imports("openai", ...)``: until the test ends, importing those packages fails.

    Modules already imported are taken out of ``sys.modules`` (and put back afterwards), and so
    are the daimon modules given with ``reload=`` so that their guarded imports run again.
    """

    def block(*names: str, reload: Sequence[str] = ()) -> None:
        blocked = set(names)
        for loaded in list(sys.modules):
            top = loaded.partition(".")[0]
            if top in blocked or any(loaded == r or loaded.startswith(r + ".") for r in reload):
                monkeypatch.delitem(sys.modules, loaded)
        monkeypatch.setattr(sys, "meta_path", [ImportBlocker(names), *sys.meta_path])

    return block
