from __future__ import annotations

import pytest

from daimon.core import BudgetExceededError, BuilderError, Usage
from daimon.cost import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    Budget,
    CostModel,
    CostTracker,
    ModelPrice,
    PriceTable,
    SpendRecord,
    TokenDirection,
)

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


def test_token_direction_values() -> None:
    assert [d.value for d in TokenDirection] == ["input", "output", "cached_input"]
    assert TokenDirection("cached_input") is TokenDirection.CACHED_INPUT


def test_price_table_is_a_cost_model() -> None:
    assert isinstance(TABLE, CostModel)
    assert TABLE.as_of == "2025-01-01"


def test_prices_are_per_million_tokens() -> None:
    assert TABLE.cost_per_token("gpt-4o", TokenDirection.INPUT) == pytest.approx(2.5 / M)
    assert TABLE.cost_per_token("gpt-4o", TokenDirection.OUTPUT) == pytest.approx(10.0 / M)
    assert TABLE.cost_per_token("gpt-4o", TokenDirection.CACHED_INPUT) == pytest.approx(1.25 / M)


def test_cached_price_defaults_to_the_input_price() -> None:
    assert TABLE.cost_per_token("gpt-4", TokenDirection.CACHED_INPUT) == pytest.approx(30.0 / M)


@pytest.mark.parametrize(
    ("model_id", "entry"),
    [
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # dated snapshot: longest prefix
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4-0613", "gpt-4"),
        ("openai:gpt-4o-mini", "gpt-4o-mini"),  # provider prefix stripped
        ("openai:gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("llama3:8b", "llama3:8b"),  # a colon inside a real id still matches exactly
        ("ollama:llama3:8b", "llama3:8b"),
        ("anthropic.claude-3-haiku-20240307-v1:0", "anthropic.claude-3-haiku"),
        ("bedrock:anthropic.claude-3-haiku-20240307-v1:0", "anthropic.claude-3-haiku"),
    ],
)
def test_lookup_exact_then_longest_prefix(model_id: str, entry: str) -> None:
    assert TABLE.price(model_id) == TABLE.prices[entry]
    expected = TABLE.prices[entry].output / M
    assert TABLE.cost_per_token(model_id, TokenDirection.OUTPUT) == pytest.approx(expected)


@pytest.mark.parametrize(
    "model_id",
    ["gpt-4omni", "gpt-4.1", "gpt-5", "claude-3-opus", "", "openai:", ":gpt-4o", "llama3.1:8b"],
)
def test_unknown_models_cost_nothing(model_id: str) -> None:
    assert TABLE.price(model_id) is None
    for direction in TokenDirection:
        assert TABLE.cost_per_token(model_id, direction) == 0.0
    assert TABLE.cost(model_id, usage(1000, 1000)) == 0.0


def test_a_prefix_needs_a_separator_after_it() -> None:
    # "gpt-4" must not price "gpt-4o" or "gpt-4.1" (different, far cheaper models).
    table = PriceTable({"gpt-4": ModelPrice(input=30.0, output=60.0)}, as_of="x")
    assert table.price("gpt-4o") is None
    assert table.price("gpt-4.1") is None
    for model_id in ("gpt-4-0613", "gpt-4:ft-acme", "gpt-4@2024", "gpt-4/variant"):
        assert table.price(model_id) is not None


def test_cost_charges_cached_input_at_the_cached_price() -> None:
    cost = TABLE.cost("gpt-4o", usage(input_tokens=1000, output_tokens=100, cached_tokens=200))
    assert cost == pytest.approx((800 * 2.5 + 200 * 1.25 + 100 * 10.0) / M)


def test_cost_without_a_cached_price_charges_input_price() -> None:
    cost = TABLE.cost("gpt-4", usage(input_tokens=1000, cached_tokens=400))
    assert cost == pytest.approx(1000 * 30.0 / M)


def test_cost_never_charges_negative_input() -> None:
    cost = TABLE.cost("gpt-4o", usage(input_tokens=100, cached_tokens=300))
    assert cost == pytest.approx(300 * 1.25 / M)


def test_repeated_lookups_agree_with_the_first() -> None:
    table = PriceTable({"m": ModelPrice(input=1.0, output=2.0)}, as_of="x")
    first = table.cost("m-1", usage(10, 10))
    assert [table.cost("m-1", usage(10, 10)) for _ in range(3)] == [first] * 3
    assert table.cost("zzz", usage(10, 10)) == table.cost("zzz", usage(10, 10)) == 0.0


def test_the_lookup_cache_stays_bounded() -> None:
    table = PriceTable({"m": ModelPrice(input=1.0, output=1.0)}, as_of="x")
    for n in range(5_000):
        table.cost(f"m-{n}", usage(1, 1))
    assert 0 < len(table._cache) <= 1024
    assert table.cost("m-1", usage(M, 0)) == pytest.approx(1.0)


def test_price_table_copies_its_prices() -> None:
    prices = {"m": ModelPrice(input=1.0, output=1.0)}
    table = PriceTable(prices, as_of="x")
    prices["m"] = ModelPrice(input=99.0, output=99.0)
    prices["n"] = ModelPrice(input=99.0, output=99.0)
    assert table.price("m") == ModelPrice(input=1.0, output=1.0)
    assert table.price("n") is None


def test_price_table_validation() -> None:
    with pytest.raises(TypeError):
        PriceTable({}, "2025-01-01")  # type: ignore[call-arg]
    with pytest.raises(BuilderError, match="ModelPrice"):
        PriceTable({"m": (1.0, 2.0)}, as_of="x")  # type: ignore[dict-item]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"input": -1.0, "output": 1.0},
        {"input": 1.0, "output": float("nan")},
        {"input": 1.0, "output": 1.0, "cached_input": float("inf")},
        {"input": "1", "output": 1.0},
    ],
)
def test_model_price_rejects_bad_prices(kwargs: dict[str, object]) -> None:
    with pytest.raises(BuilderError, match="ModelPrice"):
        ModelPrice(**kwargs)  # type: ignore[arg-type]


def test_model_price_is_frozen_and_keyword_only() -> None:
    price = ModelPrice(input=1.0, output=2.0)
    assert price.cached_input is None
    with pytest.raises(AttributeError):
        price.input = 3.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        ModelPrice(1.0, 2.0)  # type: ignore[call-arg]


# ----------------------------------------------------------------- CostTracker


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
    assert tracker.estimate("gpt-4o", 1000, 1000) == 0.0


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
        }[direction]


def test_any_cost_model_prices_through_cost_per_token() -> None:
    model = FlatCostModel()
    tracker = CostTracker(model)
    cost = tracker.record("m", usage(input_tokens=10, output_tokens=3, cached_tokens=4))
    assert cost == pytest.approx(6 * 1.0 + 4 * 0.5 + 3 * 10.0)
    assert {direction for _, direction in model.asked} == set(TokenDirection)
    assert tracker.estimate("m", 10, 3) == pytest.approx(10 * 1.0 + 3 * 10.0)


def test_estimate_prices_a_hypothetical_call_without_recording_it() -> None:
    tracker = CostTracker(TABLE)
    estimate = tracker.estimate("openai:gpt-4o", input_tokens=10_000, output_tokens=1_000)
    assert estimate == pytest.approx((10_000 * 2.5 + 1_000 * 10.0) / M)
    assert tracker.total == 0.0
    assert tracker.by_model == {}
    assert tracker.estimate("mystery", 10, 10) == 0.0
    assert tracker.estimate(None, 10, 10) == 0.0


def test_child_records_roll_up_into_the_parent() -> None:
    parent = CostTracker(TABLE)
    child = parent.child()
    grandchild = child.child()
    assert child.cost_model is TABLE

    own = parent.record("gpt-4o", usage(1000, 0))
    delegated = child.record("gpt-4o-mini", usage(1000, 0))
    deep = grandchild.record("gpt-4o", usage(0, 1000))

    assert grandchild.total == pytest.approx(deep)
    assert child.total == pytest.approx(delegated + deep)
    assert parent.total == pytest.approx(own + delegated + deep)
    gpt4o_usage, gpt4o_cost = parent.by_model["gpt-4o"]
    assert gpt4o_usage == Usage(input_tokens=1000, output_tokens=1000, requests=2)
    assert gpt4o_cost == pytest.approx(own + deep)
    assert parent.by_model["gpt-4o-mini"][1] == pytest.approx(delegated)
    assert set(child.by_model) == {"gpt-4o-mini", "gpt-4o"}
    assert child.by_model["gpt-4o"][0] == usage(0, 1000)  # the parent's own call is not the child's


def test_tracker_rejects_something_that_is_not_a_cost_model() -> None:
    with pytest.raises(BuilderError, match="cost_per_token"):
        CostTracker({"gpt-4o": 1.0})  # type: ignore[arg-type]


def test_builtin_prices_cover_the_providers_and_say_when_they_were_read() -> None:
    from daimon.cost import builtin_prices

    table = builtin_prices()
    assert table.as_of
    mini = table.price("openai:gpt-4o-mini-2024-07-18")
    assert mini is not None and 0 < mini.input < mini.output
    assert table.price("anthropic:claude-sonnet-4-5") is not None
    assert table.cost("gpt-4o-mini", Usage(input_tokens=1_000_000)) == mini.input


# ------------------------------------------------------------------ budgets and worst cases
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


def test_a_budget_refuses_what_could_pass_its_limit_or_a_callers() -> None:
    caller = Budget(10.0)
    held = caller.reserve(4.0)
    caller.settle(held, 3.0)
    assert caller.used == 3.0
    sub = Budget(None, caller)  # no limit of its own: the caller's applies
    sub.reserve(6.0)
    assert caller.used == 9.0  # held for the sub-agent while it runs
    with pytest.raises(BudgetExceededError) as refused:
        Budget(None, caller).reserve(2.0)  # a second sub-agent, in parallel
    assert (refused.value.spent, refused.value.limit) == (9.0, 10.0)
    sub.settle(6.0, 5.0)
    sub.spend(0.5)  # what its own tools reported
    assert (sub.used, caller.used) == (5.5, 8.5)
    sub.close()  # it ended: the caller counts it from the usage its tool reports
    assert caller.used == 3.0
    caller.spend(5.5)
    assert caller.used == 8.5


def test_a_budget_of_its_own_can_be_tighter_than_the_callers() -> None:
    caller = Budget(100.0)
    sub = Budget(1.0, caller, spent=0.5)  # resumed with $0.5 spent: not counted again above
    with pytest.raises(BudgetExceededError) as refused:
        sub.reserve(0.6)
    assert (refused.value.spent, refused.value.limit) == (0.5, 1.0)
    deep = Budget(None, sub)
    deep.reserve(0.25)
    assert (sub.used, caller.used) == (0.75, 0.25)
    deep.close()
    assert (sub.used, caller.used) == (0.5, 0.0)


def test_a_spend_record_goes_to_the_first_run_that_claims_it() -> None:
    assert SpendRecord.claim() is None
    record, token = SpendRecord.collect()
    try:
        assert SpendRecord.claim() is record
        assert SpendRecord.claim() is None  # nested runs do not overwrite their caller's totals
    finally:
        SpendRecord.done(token)
    assert SpendRecord.claim() is None
