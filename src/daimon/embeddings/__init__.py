"""Embedding models: one module per backend, each loaded only when asked for.

``import daimon.embeddings`` imports no backend library. :class:`OnnxEmbeddingModel` (extra
``embed``) runs all-MiniLM-L6-v2 locally with onnxruntime, no API key and no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daimon.embeddings.onnx import OnnxEmbeddingModel

__all__ = ("OnnxEmbeddingModel",)

_LAZY = {"OnnxEmbeddingModel": "daimon.embeddings.onnx"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'daimon.embeddings' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
