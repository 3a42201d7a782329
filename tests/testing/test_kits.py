from __future__ import annotations

import subprocess
import sys

import pytest

import daimon.testing
from daimon.testing.checkpoint import CheckpointConformance
from daimon.testing.memory import MemoryConformance


def test_kits_load_lazily_and_resolve() -> None:
    code = "import sys, daimon.testing; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert daimon.testing.MemoryConformance is MemoryConformance
    assert daimon.testing.CheckpointConformance is CheckpointConformance
    with pytest.raises(AttributeError, match="NoSuchKit"):
        _ = daimon.testing.NoSuchKit  # type: ignore[attr-defined]


def test_all_is_sorted_and_resolves() -> None:
    assert list(daimon.testing.__all__) == sorted(daimon.testing.__all__)
    for name in daimon.testing.__all__:
        assert getattr(daimon.testing, name) is not None


def test_suites_are_not_collected_on_their_own() -> None:
    # Only subclasses named Test* run the suites; the base classes hold no fixtures they need.
    for suite in (MemoryConformance, CheckpointConformance):
        assert not suite.__name__.startswith("Test")
        assert [name for name in vars(suite) if name.startswith("test_")]
