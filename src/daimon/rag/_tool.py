"""A tool through which an agent searches a retriever."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daimon.core.documents import ScoredDocument
from daimon.core.errors import BuilderError
from daimon.core.protocols import Retriever
from daimon.core.tools import ToolOutput
from daimon.kit.checks import check_positive
from daimon.kit.filters import parse_filter
from daimon.tools import RunContext

__all__ = ("RetrieverTool", "source_of")

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def source_of(found: ScoredDocument) -> str:
    """Where a found chunk comes from: its ``source`` metadata, else its document id."""
    metadata = found.document.metadata
    for key in ("source", "document_id"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return found.document.id


class RetrieverTool:
    """Lets an agent search a :class:`~daimon.core.Retriever` (a knowledge base, say).

    The model passes a ``query``; it reads back the best chunks, numbered, each with its source
    and score, and the tool's ``data`` holds the same as JSON.

    Args:
        retriever: What to search.
        name: The tool's name, for the model.
        description: What the tool finds, for the model; say what the documents are about.
        top_k: How many chunks to return.
        filter: A metadata filter applied to every search (see :mod:`daimon.kit.filters`).
        max_chars: Longest text of one chunk shown to the model; longer ones are cut.

    Raises:
        BuilderError: A setting is invalid (the filter is checked here too).
    """

    def __init__(
        self,
        retriever: Retriever,
        *,
        name: str = "search_documents",
        description: str = "Search the knowledge base for passages relevant to a query.",
        top_k: int = 4,
        filter: Mapping[str, Any] | None = None,
        max_chars: int = 2000,
    ) -> None:
        if not name or not set(name) <= _NAME_CHARS or len(name) > 64:
            raise BuilderError(f"tool name must be 1-64 of [A-Za-z0-9_-], got {name!r}")
        for setting, value in (("top_k", top_k), ("max_chars", max_chars)):
            check_positive(setting, value)
        try:
            parse_filter(filter)
        except ValueError as exc:
            raise BuilderError(f"RetrieverTool filter: {exc}") from None
        self.retriever = retriever
        """What the tool searches."""
        self._name = name
        self._description = description
        self._top_k = top_k
        self._filter = dict(filter) if filter else None
        self._max_chars = max_chars

    def __repr__(self) -> str:
        return f"RetrieverTool({self._name!r}, top_k={self._top_k})"

    @property
    def name(self) -> str:
        """The name the model calls it by."""
        return self._name

    @property
    def description(self) -> str:
        """What it finds, for the model."""
        return self._description

    @property
    def parameters_schema(self) -> Mapping[str, Any]:
        """One required string: the query."""
        return {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,
        }

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """Search and format the results with their sources."""
        query = str(arguments.get("query", "")).strip()
        if not query:
            return ToolOutput.error("query must not be empty")
        found = await self.retriever.retrieve(query, self._top_k, self._filter)
        return self.format(found)

    def format(self, found: list[ScoredDocument]) -> ToolOutput:
        """The model-facing text and JSON data of search results."""
        if not found:
            return ToolOutput(content="No relevant passages found.", data=[])
        blocks = []
        data = []
        for n, scored in enumerate(found, start=1):
            source = source_of(scored)
            text = scored.document.content
            if len(text) > self._max_chars:
                text = text[: self._max_chars] + " [...]"
            blocks.append(f"[{n}] source: {source} (score {scored.score:.3f})\n{text}")
            data.append(
                {"source": source, "id": scored.document.id, "score": scored.score, "text": text}
            )
        return ToolOutput(content="\n\n".join(blocks), data=data)
