"""daimon.a2a is lazy, and names its extra when the SDK is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

import daimon.a2a
from daimon.core.errors import MissingDependencyError


def test_importing_the_package_loads_no_sdk() -> None:
    code = "import sys, daimon, daimon.a2a; assert 'a2a' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(vars(daimon.a2a), "RemoteA2AAgent", raising=False)
    monkeypatch.setitem(sys.modules, "a2a", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[a2a\]"'):
        _ = daimon.a2a.RemoteA2AAgent


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError):
        _ = daimon.a2a.Nope  # type: ignore[attr-defined]
    assert set(daimon.a2a.__all__) <= set(dir(daimon.a2a))
