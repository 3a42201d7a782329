"""A tracker of what model calls used and cost, per model and in total."""

from __future__ import annotations

from collections.abc import Iterable

from daimon.core.chat import Usage
from daimon.core.errors import BuilderError
from daimon.cost._model import CostModel, TokenDirection
from daimon.cost._table import DEFAULT_MAX_OUTPUT_TOKENS, PriceTable, _charge, _Rates

__all__ = ("CostTracker",)


class _Account:
    """Running totals for one model id, turned into a :class:`Usage` only when read."""

    __slots__ = (
        "cache_write_tokens",
        "cached_tokens",
        "cost",
        "input_tokens",
        "output_tokens",
        "rates",
        "requests",
    )

    def __init__(self, rates: _Rates | None) -> None:
        self.rates = rates
        """The model's per-token prices when a price table knows them, resolved once."""
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.cache_write_tokens = 0
        self.requests = 0
        self.cost = 0.0

    def add(self, usage: Usage, cost: float) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.requests += usage.requests
        self.cost += cost

    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
            requests=self.requests,
        )


def _charge_by_model(model: CostModel, model_id: str, usage: Usage) -> float:
    """Dollars for ``usage`` priced through any :class:`CostModel`, asked on every call."""
    per_token = model.cost_per_token
    cached = usage.cached_tokens
    written = usage.cache_write_tokens
    uncached = max(usage.input_tokens - cached - written, 0)
    total = usage.output_tokens * per_token(model_id, TokenDirection.OUTPUT)
    if uncached:
        total += uncached * per_token(model_id, TokenDirection.INPUT)
    if cached:
        total += cached * per_token(model_id, TokenDirection.CACHED_INPUT)
    if written:
        total += written * per_token(model_id, TokenDirection.CACHE_WRITE)
    return total


class CostTracker:
    """Adds up usage and dollars over model calls, per model and in total.

    Safe to share between the tasks of one event loop (nothing awaits mid-update), not between
    threads.

    Args:
        cost_model: Prices the tokens; without one, usage is still recorded at cost 0.
    """

    __slots__ = ("_accounts", "_cost_model", "_table", "_total")

    def __init__(self, cost_model: CostModel | None = None) -> None:
        if cost_model is not None and not isinstance(cost_model, CostModel):
            raise BuilderError(f"cost_model must have a cost_per_token method, got {cost_model!r}")
        self._cost_model = cost_model
        # A price table's prices are fixed, so each model's are resolved once per tracker; any
        # other cost model is asked on every call, as its prices may change.
        self._table = cost_model if isinstance(cost_model, PriceTable) else None
        self._accounts: dict[str | None, _Account] = {}
        self._total = 0.0

    @property
    def cost_model(self) -> CostModel | None:
        """What prices the tokens."""
        return self._cost_model

    @property
    def total(self) -> float:
        """Dollars recorded so far."""
        return self._total

    @property
    def usage(self) -> Usage:
        """Usage recorded so far over every model."""
        total = Usage()
        for account in self._accounts.values():
            total += account.usage()
        return total

    @property
    def by_model(self) -> dict[str | None, tuple[Usage, float]]:
        """Usage and dollars per model id (``None`` for calls whose model was not known)."""
        return {model_id: (a.usage(), a.cost) for model_id, a in self._accounts.items()}

    def record(self, model_id: str | None, usage: Usage, *, requested: str | None = None) -> float:
        """Add one call's usage; returns what the call cost.

        Args:
            model_id: The model that answered (the id the response names), which prices the call.
            usage: What the call used.
            requested: The model asked for. When the cost model has no price for ``model_id``,
                the call is priced as this one, so a response naming an alias or a new snapshot
                is never counted as free.
        """
        account = self._accounts.get(model_id)
        if account is None:
            account = self._open(model_id, requested)
        rates = account.rates
        if rates is not None:
            cost = _charge(rates, usage)
        elif self._table is None and self._cost_model is not None and model_id is not None:
            cost = _charge_by_model(self._cost_model, model_id, usage)
            if not cost and requested is not None and requested != model_id:
                cost = _charge_by_model(self._cost_model, requested, usage)
        else:
            cost = 0.0
        account.add(usage, cost)
        self._total += cost
        return cost

    def worst_case(self, model_ids: Iterable[str], input_tokens: int, output_tokens: int) -> float:
        """The most a call of this size could cost when any of ``model_ids`` answers it.

        Input is priced at the highest of the input, cached-input and cache-write prices. With a
        :class:`~daimon.cost.PriceTable`, ids it does not price are left out, and when it prices
        none of them the call is priced at the table's highest prices (any model it knows could
        answer); another cost model is asked for each id, and the highest answer is taken.
        """
        if self._cost_model is None:
            return 0.0
        table = self._table
        if table is None:
            model = self._cost_model
            worst = 0.0
            for model_id in model_ids:
                per_input = max(
                    model.cost_per_token(model_id, TokenDirection.INPUT),
                    model.cost_per_token(model_id, TokenDirection.CACHED_INPUT),
                    model.cost_per_token(model_id, TokenDirection.CACHE_WRITE),
                )
                per_output = model.cost_per_token(model_id, TokenDirection.OUTPUT)
                worst = max(worst, input_tokens * per_input + output_tokens * per_output)
            return worst
        found = [r for r in map(table._rates, model_ids) if r is not None]
        if found:
            per_input = max(max(r[0], r[2], r[3]) for r in found)
            per_output = max(r[1] for r in found)
        else:
            highest = table._highest_rates()
            per_input, per_output = max(highest[0], highest[2], highest[3]), highest[1]
        return input_tokens * per_input + output_tokens * per_output

    def max_output_tokens(self, model_id: str | None) -> int:
        """The most output a call may write, for reserving budget.

        That is the price table's ``max_output_tokens`` for the model, else
        :data:`~daimon.cost.DEFAULT_MAX_OUTPUT_TOKENS`.
        """
        if self._table is None:
            return DEFAULT_MAX_OUTPUT_TOKENS
        return self._table.max_output_tokens(model_id)

    def _open(self, model_id: str | None, requested: str | None = None) -> _Account:
        table = self._table
        rates = None if table is None or model_id is None else table._rates(model_id)
        if rates is None and table is not None and requested is not None:
            rates = table._rates(requested)
        account = self._accounts[model_id] = _Account(rates)
        return account

    def __repr__(self) -> str:
        return f"CostTracker(total={self._total!r}, models={len(self._accounts)})"
