"""daimon.mcp is lazy, and names its extra when the SDK is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

import daimon.mcp
from daimon.core.errors import MissingDependencyError


def test_importing_the_package_loads_no_sdk() -> None:
    code = "import sys, daimon, daimon.mcp; assert not {'mcp', 'mcp_types'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(vars(daimon.mcp), "MCPClient", raising=False)
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[mcp\]"'):
        _ = daimon.mcp.MCPClient


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError):
        _ = daimon.mcp.Nope  # type: ignore[attr-defined]
    assert set(daimon.mcp.__all__) <= set(dir(daimon.mcp))
