"""What model calls cost: price tables, a tracker of spend, and budgets.

Prices are looked up per token and direction through a :class:`CostModel`; :class:`PriceTable` is
the usual one. A :class:`CostTracker` adds up each call's usage and cost, and its
:meth:`~CostTracker.child` trackers (one per sub-agent) roll up into it. A :class:`Budget` is
what one run may still spend, shared with the runs its tools start (sub-agents).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from daimon.core.chat import Usage
from daimon.core.errors import BudgetExceededError, BuilderError

__all__ = (
    "Budget",
    "CostModel",
    "CostTracker",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "ModelPrice",
    "PriceTable",
    "SpendRecord",
    "TokenDirection",
    "builtin_prices",
)

_PER_MILLION = 1_000_000
DEFAULT_MAX_OUTPUT_TOKENS = 128_000
"""Output tokens a budget reserves for a call without ``max_tokens`` to a model whose price entry
gives no ``max_output_tokens``: the largest output limit of the providers' current models."""
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
    max_output_tokens: int | None = None
    """The most tokens the model writes in one answer; what a budget reserves for a call without
    ``max_tokens`` (``None``: :data:`DEFAULT_MAX_OUTPUT_TOKENS`)."""

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and 0 <= value < math.inf):
                raise BuilderError(f"ModelPrice.{name} must be a finite price >= 0, got {value!r}")
        limit = self.max_output_tokens
        if limit is not None and (type(limit) is not int or limit < 1):
            raise BuilderError(
                f"ModelPrice.max_output_tokens must be a positive integer, got {limit!r}"
            )


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
        return rates[0]

    def cost(self, model_id: str, usage: Usage) -> float:
        """Dollars for ``usage`` of ``model_id``: cached input at the cached price."""
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
            rates = [
                (p.input, p.output, p.input if p.cached_input is None else p.cached_input)
                for p in self._prices.values()
            ]
            self._highest = (
                max((r[0] for r in rates), default=0.0) / _PER_MILLION,
                max((r[1] for r in rates), default=0.0) / _PER_MILLION,
                max((r[2] for r in rates), default=0.0) / _PER_MILLION,
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
        parent = self._parent
        while parent is not None:
            (parent._accounts.get(model_id) or parent._open(model_id, requested)).add(usage, cost)
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

    def worst_case(self, model_ids: Iterable[str], input_tokens: int, output_tokens: int) -> float:
        """The most a call of this size could cost when any of ``model_ids`` answers it.

        Input is priced at the higher of the input and cached-input prices. With a
        :class:`PriceTable`, ids it does not price are left out, and when it prices none of them
        the call is priced at the table's highest prices (any model it knows could answer);
        another cost model is asked for each id, and the highest answer is taken.
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
                )
                per_output = model.cost_per_token(model_id, TokenDirection.OUTPUT)
                worst = max(worst, input_tokens * per_input + output_tokens * per_output)
            return worst
        found = [r for r in map(table._rates, model_ids) if r is not None]
        if found:
            per_input = max(max(r[0], r[2]) for r in found)
            per_output = max(r[1] for r in found)
        else:
            highest = table._highest_rates()
            per_input, per_output = max(highest[0], highest[2]), highest[1]
        return input_tokens * per_input + output_tokens * per_output

    def max_output_tokens(self, model_id: str | None) -> int:
        """The most output a call may write, for reserving budget.

        That is the price table's ``max_output_tokens`` for the model, else
        :data:`DEFAULT_MAX_OUTPUT_TOKENS`.
        """
        if self._table is None:
            return DEFAULT_MAX_OUTPUT_TOKENS
        return self._table.max_output_tokens(model_id)

    def child(self) -> CostTracker:
        """A tracker, for a sub-agent, whose records also count in this one."""
        child = CostTracker(self._cost_model)
        child._parent = self
        return child

    def _open(self, model_id: str | None, requested: str | None = None) -> _Account:
        table = self._table
        rates = None if table is None or model_id is None else table._rates(model_id)
        if rates is None and table is not None and requested is not None:
            rates = table._rates(requested)
        account = self._accounts[model_id] = _Account(rates)
        return account

    def __repr__(self) -> str:
        return f"CostTracker(total={self._total!r}, models={len(self._accounts)})"


_ENCLOSING: ContextVar[Budget | None] = ContextVar("daimon_enclosing_budget", default=None)
_RECORD: ContextVar[SpendRecord | None] = ContextVar("daimon_spend_record", default=None)


class Budget:
    """What one run may spend, counted together with the runs its tools start.

    A run with ``max_budget``, or one started by a tool of a run that has a budget, gets a
    ``Budget``. Before each model call the run reserves the call's worst case; the call
    is refused when that could take this run, or any run that started it, past its limit. What a
    started run (a sub-agent) reserves and spends counts against its callers' limits while it
    runs, so sub-agents running in parallel share what their caller has left. When it ends, its
    part is withdrawn: its caller counts it again through the usage the tool reports
    (:meth:`~daimon.tools.RunContext.report_usage`, as :class:`~daimon.multiagent.AgentTool`
    does).

    Safe within one event loop: a reservation checks and holds in one step, with no await.

    Args:
        limit: Dollars this run may spend (``None``: no limit of its own).
        parent: The budget of the run whose tool started this one.
        spent: Dollars already spent (a resumed run's cost so far).
    """

    __slots__ = ("_pushed", "limit", "parent", "used")

    def __init__(
        self, limit: float | None, parent: Budget | None = None, *, spent: float = 0.0
    ) -> None:
        self.limit = limit
        self.parent = parent
        self.used = spent
        """Dollars spent and held: this run's, and those of the runs it started that still run."""
        self._pushed = 0.0

    @staticmethod
    def enclosing() -> Budget | None:
        """The budget of the run whose tool is executing here, if any."""
        return _ENCLOSING.get()

    def enter(self) -> Token[Budget | None]:
        """Make this the enclosing budget for runs started here (while a tool executes)."""
        return _ENCLOSING.set(self)

    @staticmethod
    def leave(token: Token[Budget | None]) -> None:
        """Undo :meth:`enter`."""
        _ENCLOSING.reset(token)

    def reserve(self, amount: float) -> float:
        """Hold ``amount`` for a call about to be made; returns it, for :meth:`settle`.

        Raises:
            BudgetExceededError: This run, or a run that started it, could pass its limit. The
                error names that run's spending and limit.
        """
        node: Budget | None = self
        while node is not None:
            limit = node.limit
            if limit is not None and (node.used >= limit or node.used + amount > limit):
                whose = "" if node is self else "the limit is that of a run that started this one"
                raise BudgetExceededError(node.used, limit, reserved=amount, detail=whose)
            node = node.parent
        self._add(amount)
        return amount

    def settle(self, held: float, cost: float) -> None:
        """Replace a reservation by what the call cost."""
        self._add(cost - held)

    def spend(self, cost: float) -> None:
        """Count dollars spent outside a reservation (nested work a tool reported)."""
        if cost:
            self._add(cost)

    def close(self) -> None:
        """The run ended: withdraw what it still counts in its callers' budgets."""
        if self._pushed:
            pushed, self._pushed = self._pushed, 0.0
            node = self.parent
            while node is not None:
                node.used -= pushed
                if node.parent is not None:
                    node._pushed -= pushed
                node = node.parent

    def _add(self, delta: float) -> None:
        self.used += delta
        node = self
        while node.parent is not None:
            node._pushed += delta
            node = node.parent
            node.used += delta

    def __repr__(self) -> str:
        return f"Budget(limit={self.limit!r}, used={self.used!r})"


class SpendRecord:
    """The usage and cost of a run started inside :meth:`collect`, filled in however it ends.

    :class:`~daimon.multiagent.AgentTool` uses it to report what a sub-agent spent even when it
    failed or was cancelled, its own sub-agents' spending included.
    """

    __slots__ = ("claimed", "cost", "usage")

    def __init__(self) -> None:
        self.usage = Usage()
        """Tokens the run used, nested runs' included."""
        self.cost = 0.0
        """Dollars the run spent, nested runs' included."""
        self.claimed = False

    @staticmethod
    def collect() -> tuple[SpendRecord, Token[SpendRecord | None]]:
        """A record for the next run started here; give the token to :meth:`done` afterwards."""
        record = SpendRecord()
        return record, _RECORD.set(record)

    @staticmethod
    def done(token: Token[SpendRecord | None]) -> None:
        """Stop collecting (undo :meth:`collect`)."""
        _RECORD.reset(token)

    @staticmethod
    def claim() -> SpendRecord | None:
        """For a run starting: the record it fills in, unless another run has it already."""
        record = _RECORD.get()
        if record is None or record.claimed:
            return None
        record.claimed = True
        return record


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
