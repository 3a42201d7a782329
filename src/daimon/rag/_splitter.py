"""Split text into overlapping chunks, by characters or by tokens."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from daimon.core.errors import BuilderError
from daimon.core.protocols import TokenCounter
from daimon.kit.checks import check_positive

__all__ = ("DEFAULT_SEPARATORS", "TextChunk", "TextSplitter")

DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", ". ", " ")
"""Where text is preferably cut, best first: paragraphs, lines, sentences, words."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextChunk:
    """One chunk of a text."""

    text: str
    """The chunk, without leading or trailing whitespace."""
    index: int
    """Its position among the text's chunks, from 0."""
    start: int
    """Offset of its first character in the text."""


class TextSplitter:
    """Cuts text into chunks of at most ``chunk_size``, consecutive ones sharing ``overlap``.

    Sizes are in characters, or in tokens when a ``counter`` is given (a piece's tokens are
    counted once and summed, a close estimate for BPE and WordPiece tokenizers). Text is cut at
    the first separator that makes the pieces small enough (paragraphs, then lines, sentences,
    words), and only as a last resort inside a word. Chunks keep the text exactly (whitespace
    at their ends trimmed) and where they start in it.

    Args:
        chunk_size: Most characters (or tokens) in a chunk.
        overlap: Characters (or tokens) repeated from the end of one chunk at the start of the
            next, so that a passage cut in two is found whole in one of them.
        counter: Counts tokens; ``None`` measures in characters.
        separators: Where to prefer cutting, best first.

    Raises:
        BuilderError: ``chunk_size`` is not positive, or ``overlap`` is not below it.
    """

    __slots__ = ("_chunk_size", "_counter", "_measure", "_overlap", "_separators")

    def __init__(
        self,
        chunk_size: int = 1000,
        overlap: int = 200,
        *,
        counter: TokenCounter | None = None,
        separators: Sequence[str] = DEFAULT_SEPARATORS,
    ) -> None:
        check_positive("chunk_size", chunk_size)
        if type(overlap) is not int or not 0 <= overlap < chunk_size:
            raise BuilderError(
                f"overlap must be an integer from 0 to chunk_size - 1 ({chunk_size - 1}), "
                f"got {overlap!r}"
            )
        if any(not isinstance(s, str) or not s for s in separators):
            raise BuilderError(f"separators must be non-empty strings, got {separators!r}")
        self._chunk_size = chunk_size
        self._overlap = overlap
        self._counter = counter
        self._separators = tuple(separators)
        self._measure: Callable[[str], int] = len if counter is None else counter.count_tokens

    def __repr__(self) -> str:
        unit = "characters" if self._counter is None else f"tokens of {self._counter!r}"
        return f"TextSplitter({self._chunk_size}, {self._overlap}, in {unit})"

    @property
    def chunk_size(self) -> int:
        """Most characters (or tokens) in a chunk."""
        return self._chunk_size

    @property
    def overlap(self) -> int:
        """Characters (or tokens) shared by consecutive chunks."""
        return self._overlap

    def split(self, text: str) -> list[TextChunk]:
        """The text's chunks, in order; none for blank text."""
        pieces = [(p, self._measure(p)) for p in self._pieces(text, self._separators)]
        chunks: list[TextChunk] = []
        current: list[tuple[str, int]] = []
        size = start = 0
        for piece, length in pieces:
            if current and size + length > self._chunk_size:
                self._emit(chunks, current, start)
                kept: list[tuple[str, int]] = []
                kept_size = 0
                for old in reversed(current):
                    if (
                        kept_size + old[1] > self._overlap
                        or kept_size + old[1] + length > self._chunk_size
                    ):
                        break
                    kept.insert(0, old)
                    kept_size += old[1]
                start += sum(len(p) for p, _ in current[: len(current) - len(kept)])
                current, size = kept, kept_size
            current.append((piece, length))
            size += length
        if current:
            self._emit(chunks, current, start)
        return chunks

    def _emit(self, chunks: list[TextChunk], pieces: list[tuple[str, int]], start: int) -> None:
        raw = "".join(p for p, _ in pieces)
        text = raw.strip()
        if text and (not chunks or start + raw.index(text) > chunks[-1].start):
            chunks.append(TextChunk(text=text, index=len(chunks), start=start + raw.index(text)))

    def _pieces(self, text: str, separators: tuple[str, ...]) -> list[str]:
        """Contiguous pieces of ``text`` (joined, they are ``text``), each small enough."""
        if self._measure(text) <= self._chunk_size:
            return [text] if text else []
        for n, separator in enumerate(separators):
            if separator in text:
                parts = text.split(separator)
                pieces: list[str] = []
                for m, part in enumerate(parts):
                    part = part + separator if m < len(parts) - 1 else part
                    pieces.extend(self._pieces(part, separators[n + 1 :]))
                return pieces
        return self._cut(text)

    def _cut(self, text: str) -> list[str]:
        """Cut a text with no separator into pieces that fit, by characters."""
        pieces = []
        while text:
            end = min(len(text), self._chunk_size)
            while end > 1 and self._measure(text[:end]) > self._chunk_size:
                end //= 2
            pieces.append(text[:end])
            text = text[end:]
        return pieces
