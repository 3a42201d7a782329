"""Embedding models: one module per backend, each loaded only when asked for.

``import daimon.embeddings`` imports no backend library. :class:`OnnxEmbeddingModel` (extra
``embed``) runs all-MiniLM-L6-v2 locally with onnxruntime, no API key and no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.embeddings.onnx import OnnxEmbeddingModel

__all__ = ("OnnxEmbeddingModel",)

_LAZY = {"OnnxEmbeddingModel": "daimon.embeddings.onnx"}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
