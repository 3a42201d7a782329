"""What model calls cost: prices, a tracker of spend, and budgets.

Prices are looked up per token and direction through a :class:`CostModel`; :class:`PriceTable`
is the usual one, and :func:`builtin_prices` is one for the providers' current models. A
:class:`CostTracker` adds up each call's usage and cost. A :class:`Budget` is what one run may
still spend, shared with the runs its tools start (sub-agents); a :class:`SpendRecord` collects
what such a run spent, however it ended.

Each name loads from its private module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.cost._budget import Budget
    from daimon.cost._model import CostModel, TokenDirection
    from daimon.cost._prices import builtin_prices
    from daimon.cost._spend import SpendRecord
    from daimon.cost._table import DEFAULT_MAX_OUTPUT_TOKENS, ModelPrice, PriceTable
    from daimon.cost._tracker import CostTracker

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

_LAZY = {
    "Budget": "daimon.cost._budget",
    "CostModel": "daimon.cost._model",
    "CostTracker": "daimon.cost._tracker",
    "DEFAULT_MAX_OUTPUT_TOKENS": "daimon.cost._table",
    "ModelPrice": "daimon.cost._table",
    "PriceTable": "daimon.cost._table",
    "SpendRecord": "daimon.cost._spend",
    "TokenDirection": "daimon.cost._model",
    "builtin_prices": "daimon.cost._prices",
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
