from __future__ import annotations

import subprocess
import sys

import pytest

import daimon.rag
import daimon.rag.stores
from daimon.core import MissingDependencyError


def test_all_is_sorted_and_every_name_resolves() -> None:
    for module in (daimon.rag, daimon.rag.stores):
        assert list(module.__all__) == sorted(module.__all__)
        for name in module.__all__:
            assert getattr(module, name) is not None
    assert daimon.rag.QdrantVectorStore is daimon.rag.stores.QdrantVectorStore
    with pytest.raises(AttributeError, match="NoSuchStore"):
        _ = daimon.rag.NoSuchStore
    with pytest.raises(AttributeError, match="NoSuchStore"):
        _ = daimon.rag.stores.NoSuchStore


def test_importing_daimon_rag_loads_no_optional_library() -> None:
    code = (
        "import sys, daimon.rag, daimon.rag.stores\n"
        "print(sorted(m for m in ('numpy', 'qdrant_client', 'daimon.tools') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_missing_numpy_names_the_rag_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['numpy'] = None\n"
        "from daimon.core import MissingDependencyError\n"
        "try:\n"
        "    from daimon.rag import InMemoryVectorStore\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc.extra, '|', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (
        out.stdout.strip()
        == "rag | 'numpy' is not installed; install it with: pip install \"daimon-agents[rag]\""
    )
    assert issubclass(MissingDependencyError, ImportError)
