"""What model calls cost: price tables and a tracker of spend.

Prices are looked up per token and direction through a :class:`CostModel`; :class:`PriceTable` is
the usual one. A :class:`CostTracker` adds up each call's usage and cost, and its
:meth:`~CostTracker.child` trackers (one per sub-agent) roll up into it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from daimon.core.chat import Usage
from daimon.core.errors import BuilderError

__all__ = (
    "CostModel",
    "CostTracker",
    "ModelPrice",
    "PriceTable",
    "TokenDirection",
    "builtin_prices",
)

_PER_MILLION = 1_000_000
_CACHE_LIMIT = 1024
"""Model ids a table remembers resolving; past this it starts over (real ids are few)."""

_SEPARATORS = frozenset("-:@/")
"""What may follow a price-table entry in a longer id it prices. Not ".": ``gpt-4.1`` is not
``gpt-4``, nor ``llama3.1`` ``llama3``."""

# Per-token prices of one model: (input, output, cached input).
_Rates = tuple[float, float, float]


class TokenDirection(StrEnum):
    """Which way tokens went, for pricing."""

    INPUT = "input"
    OUTPUT = "output"
    CACHED_INPUT = "cached_input"
    """Input tokens served from the provider's prompt cache."""


@runtime_checkable
class CostModel(Protocol):
    """Prices model tokens."""

    def cost_per_token(self, model_id: str, direction: TokenDirection) -> float:
        """Dollars per token of ``model_id`` in ``direction``; 0.0 for models it does not know."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelPrice:
    """One model's prices, in dollars per million tokens."""

    input: float
    """Dollars per million input tokens."""
    output: float
    """Dollars per million output tokens."""
    cached_input: float | None = None
    """Price of input tokens read from the prompt cache; ``None`` means the same as ``input``."""

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and 0 <= value < math.inf):
                raise BuilderError(f"ModelPrice.{name} must be a finite price >= 0, got {value!r}")


class PriceTable:
    """A :class:`CostModel` from a table of :class:`ModelPrice` by model id.

    A model id is priced by its exact entry, else by the longest entry it starts with where the
    next character is one of ``-:@/`` (``gpt-4o-mini-2024-07-18`` by ``gpt-4o-mini``, but never
    ``gpt-4o`` or ``gpt-4.1`` by ``gpt-4``). A provider prefix such as ``openai:`` is ignored when
    the full id has no price.

    Args:
        prices: Model id (or id prefix) to price.
        as_of: When the prices were read (say ``"2025-06-01"``); prices change, so say when.
    """

    __slots__ = ("_as_of", "_by_length", "_cache", "_prices")

    def __init__(self, prices: Mapping[str, ModelPrice], *, as_of: str) -> None:
        for model_id, price in prices.items():
            if not isinstance(price, ModelPrice):
                raise BuilderError(f"price for {model_id!r} must be a ModelPrice, got {price!r}")
        self._prices: dict[str, ModelPrice] = dict(prices)
        self._as_of = as_of
        self._by_length = sorted(self._prices, key=len, reverse=True)
        self._cache: dict[str, _Rates | None] = {}

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
        return rates[0]

    def cost(self, model_id: str, usage: Usage) -> float:
        """Dollars for ``usage`` of ``model_id``: cached input at the cached price."""
        rates = self._rates(model_id)
        return 0.0 if rates is None else _charge(rates, usage)

    def _rates(self, model_id: str) -> _Rates | None:
        cache = self._cache
        try:
            return cache[model_id]
        except KeyError:
            pass
        key = self._lookup(model_id)
        rates: _Rates | None = None
        if key is not None:
            price = self._prices[key]
            cached = price.input if price.cached_input is None else price.cached_input
            rates = (price.input / _PER_MILLION, price.output / _PER_MILLION, cached / _PER_MILLION)
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


class _Account:
    """Running totals for one model id, turned into a :class:`Usage` only when read."""

    __slots__ = ("cached_tokens", "cost", "input_tokens", "output_tokens", "rates", "requests")

    def __init__(self, rates: _Rates | None) -> None:
        self.rates = rates
        """The model's per-token prices when a price table knows them, resolved once."""
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.requests = 0
        self.cost = 0.0

    def add(self, usage: Usage, cost: float) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.requests += usage.requests
        self.cost += cost

    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            requests=self.requests,
        )


def _charge(rates: _Rates, usage: Usage) -> float:
    """Dollars for ``usage`` at per-token ``rates``; cached input is part of input."""
    cached = usage.cached_tokens
    uncached = usage.input_tokens - cached
    if uncached < 0:  # inconsistent usage: never charge negative input
        uncached = 0
    return uncached * rates[0] + cached * rates[2] + usage.output_tokens * rates[1]


def _charge_by_model(model: CostModel, model_id: str, usage: Usage) -> float:
    """Dollars for ``usage`` priced through any :class:`CostModel`, asked on every call."""
    per_token = model.cost_per_token
    cached = usage.cached_tokens
    uncached = max(usage.input_tokens - cached, 0)
    total = usage.output_tokens * per_token(model_id, TokenDirection.OUTPUT)
    if uncached:
        total += uncached * per_token(model_id, TokenDirection.INPUT)
    if cached:
        total += cached * per_token(model_id, TokenDirection.CACHED_INPUT)
    return total


class CostTracker:
    """Adds up usage and dollars over model calls, per model and in total.

    Safe to share between the tasks of one event loop (nothing awaits mid-update), not between
    threads.

    Args:
        cost_model: Prices the tokens; without one, usage is still recorded at cost 0.
    """

    __slots__ = ("_accounts", "_cost_model", "_parent", "_table", "_total")

    def __init__(self, cost_model: CostModel | None = None) -> None:
        if cost_model is not None and not isinstance(cost_model, CostModel):
            raise BuilderError(f"cost_model must have a cost_per_token method, got {cost_model!r}")
        self._cost_model = cost_model
        # A price table's prices are fixed, so each model's are resolved once per tracker; any
        # other cost model is asked on every call, as its prices may change.
        self._table = cost_model if isinstance(cost_model, PriceTable) else None
        self._accounts: dict[str | None, _Account] = {}
        self._parent: CostTracker | None = None
        self._total = 0.0

    @property
    def cost_model(self) -> CostModel | None:
        """What prices the tokens."""
        return self._cost_model

    @property
    def total(self) -> float:
        """Dollars recorded so far, sub-agents' included."""
        return self._total

    @property
    def usage(self) -> Usage:
        """Usage recorded so far over every model, sub-agents' included."""
        total = Usage()
        for account in self._accounts.values():
            total += account.usage()
        return total

    @property
    def by_model(self) -> dict[str | None, tuple[Usage, float]]:
        """Usage and dollars per model id (``None`` for calls whose model was not known)."""
        return {model_id: (a.usage(), a.cost) for model_id, a in self._accounts.items()}

    def record(self, model_id: str | None, usage: Usage) -> float:
        """Add one call's usage; returns what the call cost."""
        account = self._accounts.get(model_id)
        if account is None:
            account = self._open(model_id)
        rates = account.rates
        if rates is not None:
            cost = _charge(rates, usage)
        elif self._table is None and self._cost_model is not None and model_id is not None:
            cost = _charge_by_model(self._cost_model, model_id, usage)
        else:
            cost = 0.0
        account.add(usage, cost)
        self._total += cost
        parent = self._parent
        while parent is not None:
            (parent._accounts.get(model_id) or parent._open(model_id)).add(usage, cost)
            parent._total += cost
            parent = parent._parent
        return cost

    def estimate(self, model_id: str | None, input_tokens: int, output_tokens: int) -> float:
        """What a call of this size would cost, none of its input cached (for reserving budget)."""
        if self._cost_model is None or model_id is None:
            return 0.0
        usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1)
        if self._table is not None:
            return self._table.cost(model_id, usage)
        return _charge_by_model(self._cost_model, model_id, usage)

    def child(self) -> CostTracker:
        """A tracker, for a sub-agent, whose records also count in this one."""
        child = CostTracker(self._cost_model)
        child._parent = self
        return child

    def _open(self, model_id: str | None) -> _Account:
        table = self._table
        rates = None if table is None or model_id is None else table._rates(model_id)
        account = self._accounts[model_id] = _Account(rates)
        return account

    def __repr__(self) -> str:
        return f"CostTracker(total={self._total!r}, models={len(self._accounts)})"


def builtin_prices() -> PriceTable:
    """List prices of the providers' current models, as shipped with this daimon version.

    The table's ``as_of`` says when they were read; prices change, so check before billing.
    """
    from daimon.models import prices

    table = {
        model: ModelPrice(input=rates[0], output=rates[1], cached_input=rates[2])
        for model, rates in prices.PRICES.items()
    }
    return PriceTable(table, as_of=prices.AS_OF)
