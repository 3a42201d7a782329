"""PriceTable and ModelPrice: prices by model id, looked up exactly or by prefix."""

from __future__ import annotations

import pytest

from daimon.core import BuilderError, Usage
from daimon.cost import CostModel, ModelPrice, PriceTable, TokenDirection

from .support import TABLE, M, usage


def test_token_direction_values() -> None:
    assert [d.value for d in TokenDirection] == [
        "input",
        "output",
        "cached_input",
        "cache_write",
    ]
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


def test_cache_writes_are_charged_at_their_own_price() -> None:
    table = PriceTable(
        {"claude-x": ModelPrice(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)},
        as_of="t",
    )
    assert table.cost_per_token("claude-x", TokenDirection.CACHE_WRITE) == pytest.approx(3.75 / M)
    used = Usage(
        input_tokens=1_000 + 2_000 + 4_000,
        output_tokens=100,
        cached_tokens=2_000,
        cache_write_tokens=4_000,
        requests=1,
    )
    assert table.cost("claude-x", used) == pytest.approx(
        (1_000 * 3.0 + 2_000 * 0.3 + 4_000 * 3.75 + 100 * 15.0) / M
    )
    # Without a cache-write price, writes cost what input costs.
    assert TABLE.cost_per_token("gpt-4o", TokenDirection.CACHE_WRITE) == pytest.approx(2.5 / M)


def test_cache_write_price_is_checked() -> None:
    with pytest.raises(BuilderError, match="cache_write must be a finite price"):
        ModelPrice(input=1.0, output=1.0, cache_write=-1.0)
