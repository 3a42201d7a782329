"""Documents for retrieval."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ("Document", "ScoredDocument")


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """A piece of text with metadata, as stored in a vector store."""

    content: str
    id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    kind: Literal["document"] = field(default="document", init=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoredDocument:
    """A document found by a query, with its similarity score (higher is closer)."""

    document: Document
    score: float
    kind: Literal["scored_document"] = field(default="scored_document", init=False, repr=False)
