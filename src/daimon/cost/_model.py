"""The pricing protocol: what a token of a model costs, by direction."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol, runtime_checkable

__all__ = ("CostModel", "TokenDirection")


class TokenDirection(StrEnum):
    """Which way tokens went, for pricing."""

    INPUT = "input"
    OUTPUT = "output"
    CACHED_INPUT = "cached_input"
    """Input tokens served from the provider's prompt cache."""
    CACHE_WRITE = "cache_write"
    """Input tokens written to the provider's prompt cache (Anthropic, Bedrock)."""


@runtime_checkable
class CostModel(Protocol):
    """Prices model tokens."""

    def cost_per_token(self, model_id: str, direction: TokenDirection) -> float:
        """Dollars per token of ``model_id`` in ``direction``; 0.0 for models it does not know."""
        ...
