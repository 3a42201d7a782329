"""Shared helpers for the cost tests: a small price table and usage of one call."""

from __future__ import annotations

from daimon.core import Usage
from daimon.cost import ModelPrice, PriceTable

M = 1_000_000

TABLE = PriceTable(
    {
        "gpt-4": ModelPrice(input=30.0, output=60.0),
        "gpt-4o": ModelPrice(input=2.5, output=10.0, cached_input=1.25),
        "gpt-4o-mini": ModelPrice(input=0.15, output=0.6, cached_input=0.075),
        "llama3:8b": ModelPrice(input=0.1, output=0.2),
        "anthropic.claude-3-haiku": ModelPrice(input=0.25, output=1.25),
    },
    as_of="2025-01-01",
)


def usage(input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0) -> Usage:
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        requests=1,
    )
