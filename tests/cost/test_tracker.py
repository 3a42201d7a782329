"""CostTracker: usage and dollars per model and in total, and the worst case of a call."""

from __future__ import annotations

import pytest

from daimon.core import BuilderError, Usage
from daimon.cost import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    CostTracker,
    ModelPrice,
    PriceTable,
    TokenDirection,
)

from .support import TABLE, M, usage


def test_record_returns_the_call_cost_and_accumulates() -> None:
    tracker = CostTracker(TABLE)
    first = tracker.record("gpt-4o", usage(1000, 100))
    second = tracker.record("gpt-4o-mini-2024-07-18", usage(2000, 500, cached_tokens=1000))
    assert first == pytest.approx((1000 * 2.5 + 100 * 10.0) / M)
    assert second == pytest.approx((1000 * 0.15 + 1000 * 0.075 + 500 * 0.6) / M)
    assert tracker.total == pytest.approx(first + second)
    tracker.record("gpt-4o", usage(1000, 100))
    by_model = tracker.by_model
    assert set(by_model) == {"gpt-4o", "gpt-4o-mini-2024-07-18"}
    gpt4o_usage, gpt4o_cost = by_model["gpt-4o"]
    assert gpt4o_usage == Usage(input_tokens=2000, output_tokens=200, requests=2)
    assert gpt4o_cost == pytest.approx(2 * first)
    assert tracker.usage == Usage(
        input_tokens=4000, output_tokens=700, cached_tokens=1000, requests=3
    )


def test_a_tracker_without_a_cost_model_records_usage_at_no_cost() -> None:
    tracker = CostTracker()
    assert tracker.cost_model is None
    assert tracker.record("gpt-4o", usage(10, 5)) == 0.0
    assert tracker.total == 0.0
    assert tracker.by_model == {"gpt-4o": (usage(10, 5), 0.0)}


def test_unknown_and_missing_model_ids_cost_nothing() -> None:
    tracker = CostTracker(TABLE)
    assert tracker.record(None, usage(10, 5)) == 0.0
    assert tracker.record("mystery-model", usage(10, 5)) == 0.0
    assert tracker.by_model[None] == (usage(10, 5), 0.0)
    assert tracker.total == 0.0


class FlatCostModel:
    """Any CostModel, not a PriceTable: one price per direction, and it counts questions."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, TokenDirection]] = []

    def cost_per_token(self, model_id: str, direction: TokenDirection) -> float:
        self.asked.append((model_id, direction))
        return {
            TokenDirection.INPUT: 1.0,
            TokenDirection.OUTPUT: 10.0,
            TokenDirection.CACHED_INPUT: 0.5,
            TokenDirection.CACHE_WRITE: 2.0,
        }[direction]


def test_any_cost_model_prices_through_cost_per_token() -> None:
    model = FlatCostModel()
    tracker = CostTracker(model)
    used = Usage(
        input_tokens=12, output_tokens=3, cached_tokens=4, cache_write_tokens=2, requests=1
    )
    cost = tracker.record("m", used)
    assert cost == pytest.approx(6 * 1.0 + 4 * 0.5 + 2 * 2.0 + 3 * 10.0)
    assert {direction for _, direction in model.asked} == set(TokenDirection)


def test_tracker_rejects_something_that_is_not_a_cost_model() -> None:
    with pytest.raises(BuilderError, match="cost_per_token"):
        CostTracker({"gpt-4o": 1.0})  # type: ignore[arg-type]


def test_a_response_naming_an_unpriced_model_is_priced_as_the_model_asked_for() -> None:
    tracker = CostTracker(TABLE)
    assert tracker.record("my-alias", usage(1000, 100), requested="gpt-4o") == pytest.approx(
        (1000 * 2.5 + 100 * 10.0) / M
    )
    # The model that answered prices the call when it has a price of its own.
    assert tracker.record("gpt-4o-mini", usage(1000), requested="gpt-4o") == pytest.approx(
        1000 * 0.15 / M
    )
    assert tracker.record("mystery", usage(1000), requested="unknown") == 0.0
    assert set(tracker.by_model) == {"my-alias", "gpt-4o-mini", "mystery"}


def test_any_cost_model_falls_back_to_the_requested_model_when_the_answer_costs_nothing() -> None:
    class PerModel:
        def cost_per_token(self, model_id: str, direction: TokenDirection) -> float:
            return 1.0 if model_id == "known" else 0.0

    tracker = CostTracker(PerModel())
    assert tracker.record("alias", usage(2, 3), requested="known") == 5.0
    assert tracker.worst_case(["alias", "known"], 2, 3) == 5.0


def test_the_worst_case_takes_the_dearest_model_that_may_answer() -> None:
    tracker = CostTracker(TABLE)
    cost = tracker.worst_case(["gpt-4o-mini", "gpt-4o"], 1000, 100)
    assert cost == pytest.approx((1000 * 2.5 + 100 * 10.0) / M)
    # Models the table does not know are left out; when it knows none, its highest prices count.
    assert tracker.worst_case(["gpt-4o", "mystery"], 1000, 0) == pytest.approx(1000 * 2.5 / M)
    assert tracker.worst_case(["mystery"], 1000, 100) == pytest.approx((1000 * 30 + 100 * 60) / M)
    assert CostTracker().worst_case(["gpt-4o"], 1000, 100) == 0.0


def test_a_cached_price_above_the_input_price_is_the_worst_case_of_input() -> None:
    table = PriceTable({"m": ModelPrice(input=1.0, output=0.0, cached_input=3.0)}, as_of="t")
    assert CostTracker(table).worst_case(["m"], 10, 0) == pytest.approx(30 / M)


def test_max_output_tokens_comes_from_the_price_entry_or_the_default() -> None:
    table = PriceTable(
        {"small": ModelPrice(input=1.0, output=1.0, max_output_tokens=4096)}, as_of="t"
    )
    tracker = CostTracker(table)
    assert tracker.max_output_tokens("small-2025") == 4096
    assert tracker.max_output_tokens("other") == DEFAULT_MAX_OUTPUT_TOKENS
    assert CostTracker().max_output_tokens("small") == DEFAULT_MAX_OUTPUT_TOKENS
    with pytest.raises(BuilderError, match="max_output_tokens must be a positive integer"):
        ModelPrice(input=1.0, output=1.0, max_output_tokens=0)


def test_cache_writes_are_tracked_and_in_the_worst_case() -> None:
    table = PriceTable(
        {"claude-x": ModelPrice(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)},
        as_of="t",
    )
    tracker = CostTracker(table)
    used = Usage(input_tokens=5000, output_tokens=10, cache_write_tokens=4000, requests=1)
    assert tracker.record("claude-x", used) == pytest.approx(
        (1000 * 3.0 + 4000 * 3.75 + 10 * 15.0) / M
    )
    assert tracker.usage.cache_write_tokens == 4000
    assert tracker.by_model["claude-x"][0].cache_write_tokens == 4000
    # A budget reserves input at the dearest input rate: here the cache-write rate.
    assert tracker.worst_case(["claude-x"], 1000, 0) == pytest.approx(1000 * 3.75 / M)
