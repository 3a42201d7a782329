"""Price tables: a :class:`~daimon.cost.CostModel` from fixed prices per model id."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from daimon.core.chat import Usage
from daimon.core.errors import BuilderError
from daimon.cost._model import TokenDirection
from daimon.kit.checks import check_positive

__all__ = ("DEFAULT_MAX_OUTPUT_TOKENS", "ModelPrice", "PriceTable")

_PER_MILLION = 1_000_000
DEFAULT_MAX_OUTPUT_TOKENS = 128_000
"""Output tokens a budget reserves for a call without ``max_tokens`` to a model whose price entry
gives no ``max_output_tokens``: the largest output limit of the providers' current models."""
_CACHE_LIMIT = 1024
"""Model ids a table remembers resolving; past this it starts over (real ids are few)."""

_SEPARATORS = frozenset("-:@/")
"""What may follow a price-table entry in a longer id it prices. Not ".": ``gpt-4.1`` is not
``gpt-4``, nor ``llama3.1`` ``llama3``."""

# Per-token prices of one model: (input, output, cached input, cache write).
_Rates = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelPrice:
    """One model's prices, in dollars per million tokens."""

    input: float
    """Dollars per million input tokens."""
    output: float
    """Dollars per million output tokens."""
    cached_input: float | None = None
    """Price of input tokens read from the prompt cache; ``None`` means the same as ``input``."""
    cache_write: float | None = None
    """Price of input tokens written to the prompt cache; ``None`` means the same as ``input``."""
    max_output_tokens: int | None = None
    """The most tokens the model writes in one answer; what a budget reserves for a call without
    ``max_tokens`` (``None``: :data:`DEFAULT_MAX_OUTPUT_TOKENS`)."""

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input", "cache_write"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and 0 <= value < math.inf):
                raise BuilderError(f"ModelPrice.{name} must be a finite price >= 0, got {value!r}")
        limit = self.max_output_tokens
        if limit is not None:
            check_positive("ModelPrice.max_output_tokens", limit)


class PriceTable:
    """A :class:`~daimon.cost.CostModel` from a table of :class:`ModelPrice` by model id.

    A model id is priced by its exact entry, else by the longest entry it starts with where the
    next character is one of ``-:@/`` (``gpt-4o-mini-2024-07-18`` by ``gpt-4o-mini``, but never
    ``gpt-4o`` or ``gpt-4.1`` by ``gpt-4``). A provider prefix such as ``openai:`` is ignored when
    the full id has no price.

    Args:
        prices: Model id (or id prefix) to price.
        as_of: When the prices were read (say ``"2025-06-01"``); prices change, so say when.
    """

    __slots__ = ("_as_of", "_by_length", "_cache", "_highest", "_prices")

    def __init__(self, prices: Mapping[str, ModelPrice], *, as_of: str) -> None:
        for model_id, price in prices.items():
            if not isinstance(price, ModelPrice):
                raise BuilderError(f"price for {model_id!r} must be a ModelPrice, got {price!r}")
        self._prices: dict[str, ModelPrice] = dict(prices)
        self._as_of = as_of
        self._by_length = sorted(self._prices, key=len, reverse=True)
        self._cache: dict[str, _Rates | None] = {}
        self._highest: _Rates | None = None

    @property
    def as_of(self) -> str:
        """When the prices were read."""
        return self._as_of

    @property
    def prices(self) -> Mapping[str, ModelPrice]:
        """The table, by model id."""
        return dict(self._prices)

    def price(self, model_id: str) -> ModelPrice | None:
        """The entry that prices ``model_id``, or ``None`` when none does."""
        key = self._lookup(model_id)
        return None if key is None else self._prices[key]

    def cost_per_token(self, model_id: str, direction: TokenDirection) -> float:
        """Dollars per token of ``model_id`` in ``direction``; 0.0 for unknown models."""
        rates = self._rates(model_id)
        if rates is None:
            return 0.0
        if direction is TokenDirection.OUTPUT:
            return rates[1]
        if direction is TokenDirection.CACHED_INPUT:
            return rates[2]
        if direction is TokenDirection.CACHE_WRITE:
            return rates[3]
        return rates[0]

    def cost(self, model_id: str, usage: Usage) -> float:
        """Dollars for ``usage`` of ``model_id``: cache reads and writes at their own prices."""
        rates = self._rates(model_id)
        return 0.0 if rates is None else _charge(rates, usage)

    def max_output_tokens(self, model_id: str | None) -> int:
        """The output a call to ``model_id`` may write at most, for reserving budget."""
        price = None if model_id is None else self.price(model_id)
        if price is None or price.max_output_tokens is None:
            return DEFAULT_MAX_OUTPUT_TOKENS
        return price.max_output_tokens

    def _highest_rates(self) -> _Rates:
        """Per-token prices no entry exceeds, direction by direction (the worst case of any)."""
        if self._highest is None:
            rates = [_per_token(p) for p in self._prices.values()]
            self._highest = (
                max((r[0] for r in rates), default=0.0),
                max((r[1] for r in rates), default=0.0),
                max((r[2] for r in rates), default=0.0),
                max((r[3] for r in rates), default=0.0),
            )
        return self._highest

    def _rates(self, model_id: str) -> _Rates | None:
        cache = self._cache
        try:
            return cache[model_id]
        except KeyError:
            pass
        key = self._lookup(model_id)
        rates: _Rates | None = None
        if key is not None:
            rates = _per_token(self._prices[key])
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[model_id] = rates
        return rates

    def _lookup(self, model_id: str) -> str | None:
        candidates = [model_id]
        provider, colon, bare = model_id.partition(":")
        if colon and provider and bare:
            candidates.append(bare)
        for candidate in candidates:
            if candidate in self._prices:
                return candidate
        for known in self._by_length:  # longest first
            for candidate in candidates:
                if (
                    len(candidate) > len(known)
                    and candidate.startswith(known)
                    and candidate[len(known)] in _SEPARATORS
                ):
                    return known
        return None

    def __repr__(self) -> str:
        return f"PriceTable(<{len(self._prices)} models>, as_of={self._as_of!r})"


def _per_token(price: ModelPrice) -> _Rates:
    """A price entry's per-token rates, a missing cache price being the input price."""
    cached = price.input if price.cached_input is None else price.cached_input
    written = price.input if price.cache_write is None else price.cache_write
    return (
        price.input / _PER_MILLION,
        price.output / _PER_MILLION,
        cached / _PER_MILLION,
        written / _PER_MILLION,
    )


def _charge(rates: _Rates, usage: Usage) -> float:
    """Dollars for ``usage`` at per-token ``rates``; cache reads and writes are part of input."""
    cached = usage.cached_tokens
    written = usage.cache_write_tokens
    uncached = usage.input_tokens - cached - written
    if uncached < 0:  # inconsistent usage: never charge negative input
        uncached = 0
    total = uncached * rates[0] + usage.output_tokens * rates[1]
    if cached:
        total += cached * rates[2]
    if written:
        total += written * rates[3]
    return total
